"""The bundled model's transformer as an OpenVINO graph, built from its ``model.safetensors``.

all-MiniLM-L6-v2's transformer (a 6-layer BERT) is built as an OpenVINO graph straight from
the package's model.safetensors (:func:`bert_graph`: embeddings, self-attention through
OpenVINO's fused scaled-dot-product attention, GELU feed-forward, LayerNorms), so neither
torch nor an exporter is needed. Tokenisation (``tokenizers``, the model's tokenizer.json,
256 tokens), mean pooling and normalisation are sentence-transformers' steps, so the vectors
are the torch model's: cosine 1.0000 in fp32 (benchmarks/README.md, "The bundled model
without torch").

``int8``: the weights of the matrix products are compressed to int8 (symmetric, per output
channel; no calibration data: the weights alone decide their scales), and the graph compiled
with OpenVINO's dynamic quantization of activations (int8 per group of 64 values, computed at
run time, so the scales follow each text), with bfloat16 for the rest where the CPU has native
bf16: cosine 0.999 to fp32 on average, 0.998 at worst; 2.8x the chunks per CPU-second of
fp32 on an AVX-512 VNNI/BF16 machine (benchmarks/README.md, "Embedding inference").
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from agentic_retrieval.errors import LocalEmbeddingsUnavailableError
from agentic_retrieval.local_model.files import WEIGHTS_SHA256, damaged_model, first_line

INT8_INSTALL_HINT = (
    "the local model runs through OpenVINO, which is not installed: "
    "pip install 'openvino>=2026.4,<2027' (a dependency of agentic-retrieval)"
)
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
"""The graph's inputs, in the order the tokenizer gives them (int64, batch x tokens)."""


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
        raise damaged_model(folder, first_line(exc)) from exc

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

    inputs = [ops.parameter([-1, -1], ov.Type.i64, name=name) for name in INPUTS]
    for parameter, name in zip(inputs, INPUTS, strict=True):
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
            example_input={name: sample[name] for name in INPUTS},
        )
