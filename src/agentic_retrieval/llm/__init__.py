"""Model calls by role: resolving chat models, structured calls, output schemas."""
