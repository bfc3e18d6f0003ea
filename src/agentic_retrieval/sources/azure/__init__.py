"""Azure AI Search as a knowledge source (extra ``azure``): querying an index, and building one."""

from agentic_retrieval.errors import AzureSourceConfigurationError
from agentic_retrieval.sources.azure.source import (
    AzureSearchKnowledgeSource,
    map_http_error,
    resolve_credential,
)

__all__ = [
    "AzureSearchKnowledgeSource",
    "AzureSourceConfigurationError",
    "map_http_error",
    "resolve_credential",
]
