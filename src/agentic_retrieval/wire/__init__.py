"""The retrieve API on the wire: request/response models and rendering of graph output."""
