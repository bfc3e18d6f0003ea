"""Issue 21: all-MiniLM-L6-v2 inference on the CPU - fp32 against int8 and bf16 paths.

Variants (``--only``, names separated by ``;``), each on one thread (``torch.set_num_threads(1)``,
ORT ``intra_op_num_threads=1``, OpenVINO ``INFERENCE_NUM_THREADS=1``), so the figure is chunks
per second per core:

- ``fp32 (today)``: sentence-transformers in float32 (the reference of every figure);
- ``bf16 autocast``: ``torch.autocast("cpu", dtype=torch.bfloat16)`` (the library's default on
  a CPU with native bf16);
- ``torch int8 dynamic``: ``torch.ao.quantization.quantize_dynamic`` of every ``nn.Linear``
  (per tensor or per output channel; activations quantized per batch);
- ``torch int8 FFN + bf16 autocast``: dynamic int8 on the FFN linears only, bf16 elsewhere;
- ``torch.compile bf16``: the transformer through ``torch.compile`` (inductor) under autocast;
- ``onnxruntime fp32`` / ``int8, per channel`` (dynamic) / ``int8 static QDQ`` (per-channel
  weights, activations calibrated once, MinMax);
- ``openvino fp32`` / ``bf16`` (``INFERENCE_PRECISION_HINT``), converted with
  ``openvino.convert_model``;
- ``openvino int8 (nncf...)``: NNCF post-training static quantization (transformer preset:
  SmoothQuant and fast bias correction; recipes without SmoothQuant, with alpha 0.5, the mixed
  preset, or the FFN output projections left in float), optionally with the bf16 hint;
- ``openvino int8 weights, dynamic activations (group N)``: ``nncf.compress_weights`` (INT8_SYM)
  and OpenVINO's run-time activation quantization (``DYNAMIC_QUANTIZATION_GROUP_SIZE``);
- ``int8 library ...``: ``agentic_retrieval.embeddings.GraphEncoder``, what
  ``precision="int8"`` runs (the recipe above without NNCF: its own weight compression).

Static calibration (NNCF, ORT QDQ) uses text that is neither Cranfield nor ../shared/data: prose
sentences of this library's own docstrings, alone (query-length) and packed into passages.
The NNCF variants need ``pip install nncf`` (benchmark-only, not in any extra); OpenVINO and
NNCF run with ``openvino_telemetry`` hidden (both send usage telemetry otherwise).

Speed: ``--passages`` passages of two chunks of ``--db`` (about 255 tokens, cut by the model at
256 as in the store), batch 32, after a warm-up batch; the variants alternate in rounds so
machine load falls on all alike, and the best round counts; the rate is chunks per CPU-second
of the process. Quality (``--sets``): dense retrieval with each variant's vectors on Cranfield
(1,400 abstracts, 225 queries: nDCG@10, R@100) and the paraphrase set's held-out ``test`` half
over the chunks of ../shared/data (as bench_embedding_precision.py: nDCG@10, R@100, fact
recall@10), each also mixed with fp32's vectors (variant passages with fp32 queries and the
reverse), and the cosine of each passage's vector to its fp32 vector (mean, minimum).

    nice -n 10 .venv/bin/python benchmarks/bench_scale_embeddings.py \\
        --db /work/scratch/scale21/base120k/kb/wiki.sqlite --work /work/scratch/NAME/embed
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

Encoder = Callable[[list[str]], np.ndarray]
BATCH = 32


def cpu_flags() -> str:
    text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    flags = next((line for line in text.splitlines() if line.startswith("Flags")), "")
    wanted = ("avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "avx_vnni")
    return ", ".join(f for f in wanted if f" {f}" in flags) or "none of AVX-512/VNNI/BF16"


def load_fp32() -> Any:
    from agentic_retrieval.embeddings import _load_model

    return _load_model("cpu")


def st_encoder(model: Any, autocast: bool = False) -> Encoder:
    def encode(texts: list[str]) -> np.ndarray:
        with torch.inference_mode():
            if autocast:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    vectors = model.encode(texts, batch_size=BATCH, convert_to_numpy=False)
            else:
                vectors = model.encode(texts, batch_size=BATCH, convert_to_numpy=False)
        stacked = torch.stack([v.float() for v in vectors]).numpy()
        return stacked / np.linalg.norm(stacked, axis=1, keepdims=True)

    return encode


def torch_int8(model: Any, per_channel: bool) -> Encoder:
    import copy

    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    quantized = copy.deepcopy(model)
    spec: Any = {torch.nn.Linear: per_channel_dynamic_qconfig} if per_channel else {torch.nn.Linear}
    quantize_dynamic(quantized, spec, dtype=torch.qint8, inplace=True)
    return st_encoder(quantized)


def export_onnx(model: Any, work: Path) -> tuple[Path, Path]:
    """The transformer as ONNX (fp32) and its dynamic int8 quantization."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32, int8 = work / "minilm.onnx", work / "minilm.int8pc.onnx"
    if not fp32.exists():
        from agentic_retrieval.embeddings import keyword_transformer

        transformer = keyword_transformer(model)
        sample = model.tokenizer(["a sample sentence"], return_tensors="pt")
        torch.onnx.export(
            transformer,
            (sample["input_ids"], sample["attention_mask"], sample["token_type_ids"]),
            str(fp32),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["last_hidden_state"],
            dynamic_axes={
                name: {0: "batch", 1: "sequence"}
                for name in ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")
            },
            opset_version=17,
            dynamo=False,
        )
    if not int8.exists():
        # per-channel weights: per-tensor scales cost too much accuracy (cosine 0.93 to fp32)
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8, per_channel=True)
    return fp32, int8


def ort_encoder(model: Any, path: Path) -> Encoder:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return pooled_encoder(model, lambda feeds: session.run(None, feeds)[0])


KEYS = ("input_ids", "attention_mask", "token_type_ids")


def calibration_texts(model: Any, count: int = 300) -> list[str]:
    """Calibration text for the static int8 variants: NOT Cranfield, NOT ../shared/data.

    The docstrings of this library's own modules (prose sentences), as single sentences (the
    length of queries) and packed into passages of up to 1,200 characters (the store's
    chunks), a third and two thirds, drawn with a fixed seed.
    """
    import ast

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from corpus_wiki_like import _sentences

    import agentic_retrieval

    root = Path(agentic_retrieval.__file__).resolve().parent
    sentences: list[str] = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc:
                    sentences.extend(_sentences(doc))
    rng = random.Random(21)
    texts = [rng.choice(sentences) for _ in range(count // 3)]
    while len(texts) < count:
        start = rng.randrange(len(sentences))
        passage = sentences[start]
        for sentence in sentences[start + 1 :]:
            if len(passage) + len(sentence) > 1200:
                break
            passage = f"{passage} {sentence}"
        texts.append(passage)
    return texts


def pooled_encoder(model: Any, run: Callable[[dict[str, np.ndarray]], np.ndarray]) -> Encoder:
    """Tokenise, run a graph, mean-pool and normalise: the library's own loop.

    (:func:`agentic_retrieval.embeddings.pooled_vectors`, what the library's encoders run.)
    """
    from agentic_retrieval.embeddings import pooled_vectors

    def encode(texts: list[str]) -> np.ndarray:
        return pooled_vectors(model.tokenizer, model.max_seq_length, run, texts, BATCH)

    return encode


def openvino_model(model: Any, work: Path, int8: str | None) -> Any:
    """The transformer as an OpenVINO model; ``int8``: NNCF post-training quantization.

    ``int8`` names the recipe: ``default`` (NNCF's transformer preset: SmoothQuant, fast bias
    correction), ``no-smoothquant``, ``skip-ffn-out`` (the FFN output projections, whose
    inputs after GELU have the widest range, left in float).
    """
    from agentic_retrieval.embeddings import convert_transformer, import_openvino

    ov = import_openvino()  # no usage telemetry, as the library imports it
    fp32 = work / "minilm.ov.xml"
    if not fp32.exists():
        ov.save_model(convert_transformer(model), fp32, compress_to_fp16=False)
    if int8 is None:
        return ov.Core().read_model(fp32)
    if int8 == "weights":
        path = work / "minilm.ov.int8w.xml"
        if not path.exists():
            import nncf

            compressed = nncf.compress_weights(
                ov.Core().read_model(fp32), mode=nncf.CompressWeightsMode.INT8_SYM
            )
            ov.save_model(compressed, path, compress_to_fp16=False)
        return ov.Core().read_model(path)
    path = work / f"minilm.ov.int8.{int8}.xml"
    if not path.exists():
        import nncf
        from nncf.quantization.advanced_parameters import (
            AdvancedQuantizationParameters,
            AdvancedSmoothQuantParameters,
        )

        def transform(text: str) -> dict[str, np.ndarray]:
            batch = model.tokenizer([text], truncation=True, max_length=256, return_tensors="np")
            return {k: batch[k].astype(np.int64) for k in KEYS}

        advanced = None
        ignored = None
        if int8 == "no-smoothquant":
            advanced = AdvancedQuantizationParameters(
                smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=-1)
            )
        preset = None
        if int8 == "mixed":
            preset = nncf.QuantizationPreset.MIXED
        elif int8 == "sq-0.5":
            advanced = AdvancedQuantizationParameters(
                smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=0.5)
            )
        elif int8 == "skip-ffn-out":
            ignored = nncf.IgnoredScope(
                patterns=[r".*layer\.\d+\.output\.dense/aten::linear/MatMul"]
            )
        texts = calibration_texts(model)
        quantized = nncf.quantize(
            ov.Core().read_model(fp32),
            nncf.Dataset(texts, transform),
            model_type=nncf.ModelType.TRANSFORMER,
            preset=preset,
            subset_size=len(texts),
            ignored_scope=ignored,
            advanced_parameters=advanced,
        )
        ov.save_model(quantized, path, compress_to_fp16=False)
    return ov.Core().read_model(path)


def openvino_encoder(model: Any, graph: Any, hint: str, group: int | None = None) -> Encoder:
    from agentic_retrieval.embeddings import import_openvino

    ov = import_openvino()

    config: dict[str, Any] = {
        "INFERENCE_NUM_THREADS": torch.get_num_threads(),
        "INFERENCE_PRECISION_HINT": hint,
        "PERFORMANCE_HINT": "LATENCY",
    }
    if group is not None:  # int8 weights: quantize activations at run time, per group
        config["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = group
    compiled = ov.Core().compile_model(graph, "CPU", config)
    request = compiled.create_infer_request()
    return pooled_encoder(model, lambda feeds: request.infer(feeds)[0])


def ort_static_int8(model: Any, fp32_onnx: Path, work: Path) -> Path:
    """The ONNX graph with static QDQ int8 (per-channel weights, calibrated activations)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    path = work / "minilm.int8.static.onnx"
    if path.exists():
        return path
    prepared = work / "minilm.prep.onnx"
    quant_pre_process(str(fp32_onnx), str(prepared), skip_symbolic_shape=True)

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self, texts: list[str]) -> None:
            self.items = iter(texts)

        def get_next(self) -> dict[str, np.ndarray] | None:
            text = next(self.items, None)
            if text is None:
                return None
            batch = model.tokenizer([text], truncation=True, max_length=256, return_tensors="np")
            return {k: batch[k].astype(np.int64) for k in KEYS}

    quantize_static(
        str(prepared),
        str(path),
        Reader(calibration_texts(model)),
        quant_format=QuantFormat.QDQ,
        op_types_to_quantize=["MatMul"],
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        calibrate_method=CalibrationMethod.MinMax,
    )
    return path


def torch_ffn_int8_bf16(model: Any) -> Encoder:
    """int8 dynamic on the FFN linears only, bf16 autocast for the rest."""
    import copy

    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    quantized = copy.deepcopy(model)
    names = {
        name: per_channel_dynamic_qconfig
        for name, module in quantized.named_modules()
        if isinstance(module, torch.nn.Linear)
        and name.endswith(("intermediate.dense", "output.dense"))
        and ".attention." not in name
    }
    quantize_dynamic(quantized, names, dtype=torch.qint8, inplace=True)
    # the dynamic int8 kernels take float32: cast what autocast hands them
    for module in quantized.modules():
        if type(module).__name__ == "Linear" and type(module).__module__.startswith(
            "torch.ao.nn.quantized.dynamic"
        ):
            module.register_forward_pre_hook(lambda _m, args: tuple(a.float() for a in args))
    return st_encoder(quantized, autocast=True)


def torch_compiled_bf16(model: Any) -> Encoder:
    import copy

    compiled = copy.deepcopy(model)
    # sentence-transformers runs ``model`` (``auto_model`` is a read-only alias of it)
    compiled[0].model = torch.compile(compiled[0].model, dynamic=True)
    return st_encoder(compiled, autocast=True)


def passages(db: Path, count: int) -> list[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)  # a shared, read-only corpus
    total = conn.execute("SELECT max(rid) FROM chunks").fetchone()[0]
    rng = random.Random(21)
    rids = sorted(rng.sample(range(1, total + 1), count * 2))
    rows = conn.execute(
        f"SELECT title, content FROM chunks WHERE rid IN ({','.join('?' * len(rids))})", rids
    ).fetchall()
    conn.close()
    texts = [f"{t}\n{c}" if t else c for t, c in rows]
    # two chunks per passage, so that every passage fills the model's 256 tokens (a chunk of
    # 1,200 characters alone is about 190)
    return [f"{a} {b}" for a, b in zip(texts[0::2], texts[1::2], strict=False)][:count]


def quality_sets(
    wanted: list[str], split: str = "test"
) -> dict[str, tuple[list[str], list[str], list[str], Any, Any]]:
    """(keys, passages, queries, qrels, judged) per data set: Cranfield, the paraphrase set."""
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_embedding_precision import SHARED, cranfield_corpus, paraphrase_corpus

    sets: dict[str, tuple[list[str], list[str], list[str], Any, Any]] = {}
    if not (SHARED / "collections" / "cranfield" / "corpus.jsonl").is_file():
        return sets
    if "Cranfield" in wanted:
        sets["Cranfield"] = (*cranfield_corpus(), None)
    if "paraphrase" in wanted and (SHARED / "data").is_dir():
        with tempfile.TemporaryDirectory(prefix="bench-embeddings-") as tmp:
            sets[f"paraphrase ({split} half)"] = paraphrase_corpus(Path(tmp), split)
    return sets


def quality(
    encoders: dict[str, Encoder], wanted: list[str], work: Path, split: str = "test"
) -> list[str]:
    """Dense retrieval with each variant's vectors, and mixed with fp32's, per data set.

    Rows: the variant for passages and queries alike, then its passages searched with fp32
    queries and fp32 passages with its queries (what an index holding both meets); the
    cosine of each passage's vector to its fp32 vector (mean, minimum).
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_embedding_precision import retrieval_scores

    rows = []
    for label, (keys, texts, queries, qrels, judged) in quality_sets(wanted, split).items():
        vectors = {}
        cache = work / f"fp32-{label.split(' ')[0]}-{split}.npz"
        for name, encode in encoders.items():
            started = time.perf_counter()
            if name == "fp32 (today)" and cache.is_file():  # the reference, computed once
                saved = np.load(cache)
                vectors[name] = (saved["docs"], saved["queries"])
                continue
            vectors[name] = (encode(texts), encode(queries))
            if name == "fp32 (today)":
                np.savez(cache, docs=vectors[name][0], queries=vectors[name][1])
            print(f"  {label} {name}: {time.perf_counter() - started:.0f} s", flush=True)
        base_docs, base_queries = vectors["fp32 (today)"]
        base = None
        for name, (docs, asked) in vectors.items():
            cosines = np.sum(docs * base_docs, axis=1)
            pairings = [("own", docs, asked)]
            if name != "fp32 (today)":
                pairings += [("docs / fp32 queries", docs, base_queries)]
                pairings += [("fp32 docs / queries", base_docs, asked)]
            for pairing, d, q in pairings:
                ndcg, recall, facts = retrieval_scores(d, q, keys, qrels, judged)
                base = ndcg if base is None else base
                rows.append(
                    f"| {label} | {name} | {pairing} | {ndcg:.4f} | {recall:.4f} | {facts} "
                    f"| {ndcg - base:+.4f} | {cosines.mean():.5f} | {cosines.min():.5f} |"
                )
                print(rows[-1], flush=True)
    return rows


VARIANTS = (
    "fp32 (today)",
    "bf16 autocast",
    "torch int8 dynamic, per tensor",
    "torch int8 dynamic, per channel",
    "torch int8 FFN + bf16 autocast",
    "torch.compile bf16",
    "onnxruntime fp32",
    "onnxruntime int8, per channel",
    "onnxruntime int8 static QDQ",
    "openvino fp32",
    "openvino bf16",
    "openvino int8 (nncf)",
    "openvino int8 (nncf) + bf16",
    "openvino int8 (nncf, no SmoothQuant)",
    "openvino int8 (nncf, FFN output float)",
    "openvino int8 (nncf, mixed preset)",
    "openvino int8 (nncf, SmoothQuant 0.5)",
    "openvino int8 weights, dynamic activations (group 32)",
    "openvino int8 weights, dynamic activations (group 128)",
    "openvino int8 weights, dynamic activations (group 384)",
    "openvino int8 weights, dynamic activations (group 128) + bf16",
    "openvino int8 weights, dynamic activations (group 384) + bf16",
    "int8 library (OpenVINO, int8 weights, dynamic int8 activations)",
    "int8 library, group 32",
    "int8 library, group 64",
    "int8 library, group 128, f32 hint",
)
DEFAULT = ";".join(
    v for v in VARIANTS if v not in ("torch.compile bf16",) and "per tensor" not in v
)


def build(name: str, model: Any, work: Path) -> Encoder:
    """The encoder of one variant (graphs exported/quantized once into ``work``)."""
    if name == "fp32 (today)":
        return st_encoder(model)
    if name == "bf16 autocast":
        return st_encoder(model, autocast=True)
    if name.startswith("torch int8 dynamic"):
        return torch_int8(model, per_channel="channel" in name)
    if name == "torch int8 FFN + bf16 autocast":
        return torch_ffn_int8_bf16(model)
    if name == "torch.compile bf16":
        return torch_compiled_bf16(model)
    if name.startswith("onnxruntime"):
        fp32_onnx, int8_onnx = export_onnx(model, work)
        if name == "onnxruntime fp32":
            return ort_encoder(model, fp32_onnx)
        if name == "onnxruntime int8, per channel":
            return ort_encoder(model, int8_onnx)
        return ort_encoder(model, ort_static_int8(model, fp32_onnx, work))
    if name == "openvino fp32":
        return openvino_encoder(model, openvino_model(model, work, None), "f32")
    if name == "openvino bf16":
        return openvino_encoder(model, openvino_model(model, work, None), "bf16")
    if name.startswith("int8 library"):
        from agentic_retrieval.embeddings import GraphEncoder, bundled_model_dir

        group = int(name.split("group ")[1].split(",")[0].rstrip(")")) if "group" in name else 128
        # the "f32 hint" variant is no longer a setting of the library's encoder: it follows
        # the CPU (bf16 where native)
        runner = GraphEncoder(bundled_model_dir(), "int8", cache_dir=work, group_size=group)
        return lambda texts: runner.encode(texts, BATCH)
    if name.startswith("openvino int8 weights"):
        group = int(name.split("(group ")[1].split(")")[0])
        hint = "bf16" if name.endswith("+ bf16") else "f32"
        return openvino_encoder(model, openvino_model(model, work, "weights"), hint, group)
    recipe = {
        "openvino int8 (nncf)": "default",
        "openvino int8 (nncf) + bf16": "default",
        "openvino int8 (nncf, no SmoothQuant)": "no-smoothquant",
        "openvino int8 (nncf, FFN output float)": "skip-ffn-out",
        "openvino int8 (nncf, mixed preset)": "mixed",
        "openvino int8 (nncf, SmoothQuant 0.5)": "sq-0.5",
    }[name]
    hint = "bf16" if name.endswith("+ bf16") else "f32"
    return openvino_encoder(model, openvino_model(model, work, recipe), hint)


def main() -> int:
    # OpenVINO and NNCF send usage telemetry unless opted out; both treat a missing
    # openvino_telemetry package as "no telemetry"
    sys.modules.setdefault("openvino_telemetry", None)  # type: ignore[arg-type]
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--passages", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-quality", action="store_true")
    parser.add_argument("--sets", default="Cranfield,paraphrase", help="quality data sets")
    parser.add_argument(
        "--split", default="test", help="paraphrase questions: test (held out) or tune"
    )
    parser.add_argument(
        "--only", default=DEFAULT, help=f"variants separated by ; (of: {'; '.join(VARIANTS)})"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (speed: keep 1)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {args.threads} thread(s); CPU flags: {cpu_flags()}; "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    model = load_fp32()
    texts = passages(args.db, args.passages)
    tokens = [len(model.tokenizer(t, truncation=True, max_length=256)["input_ids"]) for t in texts]
    print(f"{len(texts)} passages of {np.mean(tokens):.0f} tokens on average (cut at 256)")
    names = ["fp32 (today)", *(n for n in args.only.split(";") if n and n != "fp32 (today)")]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}")
    encoders: dict[str, Encoder] = {}
    for name in names:
        started = time.process_time()
        try:
            encoder = build(name, model, args.work)
            encoder(texts[:2])  # torch.compile and OpenVINO fail here if they fail at all
        except Exception as exc:  # a variant that cannot run is reported, the others go on
            print(f"  {name}: FAILED ({type(exc).__name__}: {exc})", flush=True)
            continue
        encoders[name] = encoder
        print(f"  built {name} ({time.process_time() - started:.0f} CPU-s)", flush=True)
    reference = encoders["fp32 (today)"](texts)
    rates: dict[str, list[float]] = {name: [] for name in encoders}
    agreement = {}
    for name, encode in encoders.items():
        vectors = encode(texts[:BATCH])  # warm-up
        agreement[name] = float(np.mean(np.sum(vectors * reference[:BATCH], axis=1)))
    for number in range(args.rounds):
        for name, encode in encoders.items():
            started, cpu = time.perf_counter(), time.process_time()
            encode(texts)
            elapsed, used = time.perf_counter() - started, time.process_time() - cpu
            rates[name].append(len(texts) / used)
            print(
                f"  round {number + 1} {name}: {len(texts) / used:.1f} per CPU-second "
                f"({len(texts) / elapsed:.1f} wall), load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    print(f"\nload average after the speed rounds {os.getloadavg()[0]:.2f}")
    base_rate = max(rates["fp32 (today)"], default=float("nan"))  # --rounds 0: quality only
    print("| variant | chunks per CPU-s (best round) | vs fp32 | ms per chunk | cosine to fp32 |")
    print("| --- | --- | --- | --- | --- |")
    for name in encoders:
        best = max(rates[name], default=float("nan"))
        print(
            f"| {name} | {best:.1f} | {best / base_rate:.2f}x | {1000 / best:.0f} "
            f"| {agreement[name]:.4f} |",
            flush=True,
        )
    if not args.no_quality:
        torch.set_num_threads(2)  # quality does not depend on threads
        rows = quality(encoders, args.sets.split(","), args.work, args.split)
        print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
        print(
            "| data set | variant | documents / queries | nDCG@10 | R@100 | fact recall@10 "
            "| ΔnDCG@10 vs fp32 | cosine to fp32, mean | min |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for row in rows:
            print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
