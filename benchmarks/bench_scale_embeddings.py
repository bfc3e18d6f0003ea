"""Issue 21: all-MiniLM-L6-v2 inference on the CPU - fp32 against int8 and bf16 paths.

Variants, each on one thread (``torch.set_num_threads(1)``, ORT ``intra_op_num_threads=1``),
so the figure is chunks per second per core:

- ``fp32``: sentence-transformers as the library runs it today;
- ``torch int8 dynamic``: ``torch.ao.quantization.quantize_dynamic`` of every ``nn.Linear``
  (int8 weights per tensor or per output channel, activations quantized per batch; x86
  kernels, VNNI where present);
- ``bf16 autocast``: ``torch.autocast("cpu", dtype=torch.bfloat16)`` (AVX-512 BF16);
- ``onnxruntime fp32``: the same transformer exported with ``torch.onnx.export``;
- ``onnxruntime int8``: that graph through ``onnxruntime.quantization.quantize_dynamic``
  (QInt8 weights per channel, dynamic activations; MatMulInteger kernels). (Tried and dropped:
  per-tensor weights, cosine 0.93 to fp32; ORT's transformer fusion first, no faster here.)

Speed: ``--passages`` chunks of the benchmark corpus (title + content, cut by the model at 256
tokens as in the store), batch 32, after a warm-up batch; the variants alternate in rounds so
machine load falls on all alike, and the best round counts (the least-disturbed). Quality:
nDCG@10 and R@100 of dense retrieval on Cranfield (1,400 abstracts, 225 queries) with each
variant's vectors, and each variant's cosine to fp32 on the same passages.

    .venv/bin/python benchmarks/bench_scale_embeddings.py --db WORK/kb/wiki.sqlite \\
        --work /work/scratch/scale21/embed
"""

from __future__ import annotations

import argparse
import json
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

        class Transformer(torch.nn.Module):
            """The model's forward by keyword (its positional order changes across versions)."""

            def __init__(self, inner: torch.nn.Module) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
                return self.inner(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    token_type_ids=token_type_ids,
                ).last_hidden_state

        transformer = Transformer(model[0].auto_model.eval())
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
    tokenizer = model.tokenizer
    limit = model.max_seq_length

    def encode(texts: list[str]) -> np.ndarray:
        out = []
        for start in range(0, len(texts), BATCH):
            batch = tokenizer(
                texts[start : start + BATCH],
                padding=True,
                truncation=True,
                max_length=limit,
                return_tensors="np",
            )
            feeds = {
                k: batch[k].astype(np.int64)
                for k in ("input_ids", "attention_mask", "token_type_ids")
            }
            hidden = session.run(None, feeds)[0]
            mask = feeds["attention_mask"][..., None].astype(np.float32)
            pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
            out.append(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))
        return np.vstack(out)

    return encode


def passages(db: Path, count: int) -> list[str]:
    conn = sqlite3.connect(db)
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


def cranfield_quality(encoders: dict[str, Encoder]) -> dict[str, tuple[float, float]]:
    from agentic_retrieval.eval import load_beir
    from agentic_retrieval.eval.metrics import ir_metrics, mean

    root = Path(__file__).resolve().parents[1]
    cranfield = next(
        (
            p / "collections" / "cranfield"
            for p in (root / ".." / "shared", root / ".." / ".." / "shared")
            if (p / "collections" / "cranfield" / "corpus.jsonl").is_file()
        ),
        None,
    )
    if cranfield is None:
        return {}
    rows = [json.loads(line) for line in (cranfield / "corpus.jsonl").read_text().splitlines()]
    rows = [r for r in rows if (r.get("title") or r.get("text"))]
    texts = [f"{r.get('title', '')}\n{r.get('text', '')}".strip() for r in rows]
    dataset = load_beir(cranfield)
    qrels = {q.id: dict(q.relevant) for q in dataset.questions}
    out = {}
    for name, encode in encoders.items():
        started = time.perf_counter()
        docs = encode(texts)
        queries = encode([q.text for q in dataset.questions])
        similarity = queries @ docs.T
        runs = {
            q.id: [rows[i]["_id"] for i in np.argsort(-similarity[n], kind="stable")[:100]]
            for n, q in enumerate(dataset.questions)
        }
        metrics = ir_metrics(qrels, runs)
        out[name] = (mean(metrics["nDCG@10"].values()), mean(metrics["R@100"].values()))
        print(
            f"  cranfield {name}: nDCG@10 {out[name][0]:.4f}, R@100 {out[name][1]:.4f} "
            f"({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--passages", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-quality", action="store_true")
    parser.add_argument("--only", help="variant names separated by ; (default: all)")
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
    fp32_onnx, int8_onnx = export_onnx(model, args.work)
    encoders: dict[str, Encoder] = {
        "fp32 (today)": st_encoder(model),
        "torch int8 dynamic, per tensor": torch_int8(model, per_channel=False),
        "torch int8 dynamic, per channel": torch_int8(model, per_channel=True),
        "bf16 autocast": st_encoder(model, autocast=True),
        "onnxruntime fp32": ort_encoder(model, fp32_onnx),
        "onnxruntime int8, per channel": ort_encoder(model, int8_onnx),
    }
    if args.only:
        wanted = {"fp32 (today)", *args.only.split(";")}
        encoders = {name: e for name, e in encoders.items() if name in wanted}
    reference = encoders["fp32 (today)"](texts)
    rates: dict[str, list[float]] = {name: [] for name in encoders}
    agreement = {}
    for name, encode in encoders.items():
        vectors = encode(texts[:BATCH])  # warm-up
        agreement[name] = float(np.mean(np.sum(vectors * reference[:BATCH], axis=1)))
    for _ in range(args.rounds):
        for name, encode in encoders.items():
            started, cpu = time.perf_counter(), time.process_time()
            encode(texts)
            elapsed = time.perf_counter() - started
            rates[name].append(len(texts) / elapsed)
            print(
                f"  {name}: {len(texts) / elapsed:.1f} chunks/s wall, "
                f"{len(texts) / (time.process_time() - cpu):.1f} per CPU-second",
                flush=True,
            )
    quality = {} if args.no_quality else cranfield_quality(encoders)
    # --rounds 0 measures quality only
    base_rate = max(rates["fp32 (today)"], default=float("nan"))
    base_quality = quality.get("fp32 (today)")
    print(f"\nload average {os.getloadavg()[0]:.2f}")
    print(
        "| variant | chunks/s per core (best round) | vs fp32 | ms per chunk | cosine to fp32 "
        "| Cranfield nDCG@10 | R@100 | ΔnDCG@10 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in encoders:
        best = max(rates[name], default=float("nan"))
        q = quality.get(name)
        delta = f"{q[0] - base_quality[0]:+.4f}" if q and base_quality else "-"
        print(
            f"| {name} | {best:.1f} | {best / base_rate:.2f}x | {1000 / best:.0f} "
            f"| {agreement[name]:.4f} | {q[0] if q else float('nan'):.4f} "
            f"| {q[1] if q else float('nan'):.4f} | {delta} |"
        )
    sizes = {p.name: p.stat().st_size / 1e6 for p in (fp32_onnx, int8_onnx)}
    print(f"ONNX graphs: {sizes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
