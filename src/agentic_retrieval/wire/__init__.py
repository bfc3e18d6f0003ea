"""The retrieve API on the wire: the request/response models, a request's run, the event stream."""
