"""The bundled model's compiled graph: built once into the cache, tokenised, pooled, normalised.

Each graph is built once per model, recipe and OpenVINO version (well under a second) and kept
under the cache directory (``$AGENTIC_RETRIEVAL_CACHE``, see
:func:`~agentic_retrieval.local_model.files.library_cache_dir`) in ``models/``, with OpenVINO's
compiled blob beside it, so a later process compiles nothing: that is what makes a cold start
fast.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal

import numpy as np

from agentic_retrieval.errors import LocalEmbeddingsUnavailableError
from agentic_retrieval.local_model.bert import (
    INPUTS,
    bert_graph,
    compress_weights,
    import_openvino,
)
from agentic_retrieval.local_model.files import (
    LOCAL_DIMENSION,
    NO_EMBEDDINGS_HINT,
    damaged_model,
    first_line,
    library_cache_dir,
)

logger = logging.getLogger(__name__)

Precision = Literal["bf16", "fp32", "int8"]
GROUP_SIZE = 64
"""Activation values sharing one int8 scale. Measured (benchmarks/README.md, "Embedding
inference"): 64 is the largest group within 0.005 nDCG@10 of fp32 on both quality sets (128:
-0.0065 on the paraphrase set), and 32 falls below 2.5x fp32's speed."""
_RECIPES = {"fp32": "bert-graph-1", "bf16": "bert-graph-1", "int8": "bert-graph-1-int8-sym"}


def int8_available() -> bool:
    """Whether OpenVINO is installed (without importing it)."""
    from importlib.util import find_spec

    return find_spec("openvino") is not None


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
    return tuple(openvino_core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


@lru_cache(maxsize=1)
def openvino_core() -> Any:
    """OpenVINO's runtime, one per process (forgotten in a forked child)."""
    return import_openvino().Core()


class GraphEncoder:
    """The bundled model as a compiled OpenVINO graph, tokenised with ``tokenizers``.

    Args:
        folder: The model's files (``model.safetensors``, ``tokenizer.json``, ``config.json``).
        precision: ``fp32``, ``bf16`` or ``int8``.
        cache_dir: Where graphs are kept (default: the library's cache directory).
        group_size: Activation values sharing one int8 scale (``int8`` only).
        threads: CPU threads the compiled model runs on (``None``: OpenVINO's choice, every
            core).

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
        threads: int | None = None,
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
            raise damaged_model(folder, f"tokenizer.json: {first_line(exc)}") from exc
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
        if threads is not None:
            config["INFERENCE_NUM_THREADS"] = threads
        try:
            compiled = openvino_core().compile_model(str(path), "CPU", config)
        except RuntimeError as exc:  # a damaged cached graph: build it again, once
            logger.warning("rebuilding the local model's graph (%s)", first_line(exc))
            shutil.rmtree(path.parent, ignore_errors=True)
            _build(folder, path, int8=precision == "int8")
            compiled = openvino_core().compile_model(str(path), "CPU", config)
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


def _max_length(folder: Path) -> int:
    """The model's window in tokens (sentence-transformers' ``max_seq_length``: 256)."""
    try:
        config = json.loads((folder / "sentence_bert_config.json").read_text())
        return int(config.get("max_seq_length", 256))
    except (OSError, ValueError, TypeError, AttributeError):
        return 256


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
        feeds = {name: batch[name].astype(np.int64) for name in INPUTS}
        rows.append(_mean_pooled(np.asarray(run(feeds)), feeds["attention_mask"]))
    return np.vstack(rows) if rows else np.zeros((0, 0), dtype=np.float32)
