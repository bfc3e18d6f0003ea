"""The local model in int8 through OpenVINO (``precision="int8"``, the ``[openvino]`` extra).

all-MiniLM-L6-v2's transformer is converted from the loaded sentence-transformers model to an
OpenVINO graph, the weights of its matrix products compressed to int8 (symmetric, per
output channel; no calibration data: the weights alone decide their scales), and the graph
compiled with OpenVINO's dynamic quantization of activations (int8 per group of 64 values,
computed at run time, so the scales follow each text), with bfloat16 for the rest where the
CPU has native bf16. Tokenisation, mean pooling and normalisation are the
sentence-transformers model's own steps, so the vectors are the same model's (cosine 0.999 to
fp32 on average, 0.998 at worst).

Measured on this project's 2-core machine (AMD EPYC, AVX-512 VNNI and BF16, no AMX;
benchmarks/README.md, "Embedding inference"): 2.8x the chunks per CPU-second of fp32 (bf16
autocast: 1.8x), with Cranfield and paraphrase nDCG@10 within 0.002 of fp32, also when int8
vectors are searched with fp32 queries or the reverse.

The compressed graph is built once per model and OpenVINO version (about 3 CPU-seconds; 57
MB, the embedding tables stay float) and kept under the cache directory
(``$AGENTIC_RETRIEVAL_CACHE``, see :func:`agentic_retrieval.kb.loader.default_cache_dir`), in
``models/``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import tempfile
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from agentic_retrieval.errors import LocalEmbeddingsUnavailableError

logger = logging.getLogger(__name__)

INSTALL_HINT = (
    "int8 local embeddings need the [openvino] extra: "
    "pip install 'agentic-retrieval[local,openvino]'"
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
        rows = []
        for start in range(0, len(texts), batch_size):
            batch = self.tokenizer(
                texts[start : start + batch_size],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="np",
            )
            feeds = {name: batch[name].astype(np.int64) for name in _INPUTS}
            hidden = np.asarray(self._request.infer(feeds)[0], dtype=np.float32)
            # mean over the text's tokens (padding excluded), as the model's Pooling does
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
        from agentic_retrieval.kb.loader import default_cache_dir

        cache_dir = default_cache_dir()
    digest = hashlib.sha256(_RECIPE.encode())
    digest.update(f"openvino={version('openvino')}".encode())
    for file in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        digest.update(file.relative_to(model_dir).as_posix().encode())
        digest.update(str(file.stat().st_size).encode())
        if file.suffix in {".json", ".txt"}:
            digest.update(file.read_bytes())
    return cache_dir / "models" / f"{model_dir.name}-int8-{digest.hexdigest()[:16]}" / "model.xml"


def _build(model: Any, path: Path) -> None:
    """Convert the transformer, compress its weights to int8, save the graph under ``path``.

    Written into a temporary folder beside the target and renamed into place, so a reader
    never sees half a graph and two processes building at once both end with a whole one.
    """
    import torch

    ov = import_openvino()
    logger.info("building the int8 graph of the local model into %s (once)", path.parent)

    class Transformer(torch.nn.Module):
        """The transformer's forward by keyword, its last hidden state as the output."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    sample = model.tokenizer(["a sample sentence", "another"], padding=True, return_tensors="pt")
    with warnings.catch_warnings():
        # tracing warns about two Python branches of the attention mask code; both are
        # constant for an encoder given a mask (checked: padded batches match fp32)
        warnings.simplefilter("ignore")
        graph = ov.convert_model(
            Transformer(model[0].auto_model.eval()),
            example_input={name: sample[name] for name in _INPUTS},
        )
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
        raise LocalEmbeddingsUnavailableError(INSTALL_HINT) from exc
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
