"""Deprecated import path: use ``agentic_retrieval.kb.loader``.

Kept so that code written against the 0.1 layout keeps working; it will be removed in 0.3.
"""

import warnings

from agentic_retrieval.kb.loader import *  # noqa: F403

warnings.warn(
    "agentic_retrieval.kb_loader moved to agentic_retrieval.kb.loader",
    DeprecationWarning,
    stacklevel=2,
)
