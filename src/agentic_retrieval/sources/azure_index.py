"""Deprecated import path: use ``agentic_retrieval.sources.azure.index``.

Kept so that code written against the 0.1 layout keeps working; it will be removed in 0.3.
"""

import warnings

from agentic_retrieval.sources.azure.index import *  # noqa: F403

warnings.warn(
    "agentic_retrieval.sources.azure_index moved to agentic_retrieval.sources.azure.index",
    DeprecationWarning,
    stacklevel=2,
)
