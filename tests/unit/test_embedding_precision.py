"""The local model's precision: bf16 where the CPU has it, fp32 elsewhere, forced by a setting."""

from __future__ import annotations

import json
import logging
import sys

import numpy as np
import pytest
from tests.fakes import ConceptEmbeddings, NamedConcepts, write

import agentic_retrieval.embeddings as embeddings_module
import agentic_retrieval.local_model.encoder as encoder_module
from agentic_retrieval.embeddings import (
    PRECISION_ENV_VAR,
    LocalEmbeddings,
    local_embeddings_available,
    resolve_precision,
    vectors_made_with,
)
from agentic_retrieval.errors import (
    EmbeddingsConfigError,
    KnowledgeBaseDirectoryError,
    LocalEmbeddingsUnavailableError,
)
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.kb.loader import CACHE_ENV_VAR, default_cache_dir
from agentic_retrieval.sources.base import SearchQuery

needs_model = pytest.mark.skipif(
    not local_embeddings_available(), reason="the [local] extra is not installed"
)
needs_openvino = pytest.mark.skipif(
    not embeddings_module.int8_available(), reason="the [openvino] extra is not installed"
)


@pytest.mark.parametrize("native", [True, False])
def test_auto_follows_the_cpu(monkeypatch, native):
    monkeypatch.delenv(PRECISION_ENV_VAR, raising=False)
    monkeypatch.setattr(embeddings_module, "bf16_supported", lambda: native)
    expected = "bf16" if native else "fp32"
    assert resolve_precision(None) == expected
    assert resolve_precision("auto") == expected
    assert resolve_precision(" AUTO ") == expected
    # other devices keep fp32: bf16 autocast was measured on CPUs only
    assert resolve_precision("auto", device="cuda") == "fp32"


def test_a_setting_forces_either(monkeypatch):
    monkeypatch.setattr(embeddings_module, "bf16_supported", lambda: True)
    monkeypatch.setenv(PRECISION_ENV_VAR, "fp32")
    assert resolve_precision(None) == "fp32"
    assert resolve_precision("bf16") == "bf16"  # an explicit argument wins over the variable
    monkeypatch.setattr(embeddings_module, "bf16_supported", lambda: False)
    monkeypatch.setenv(PRECISION_ENV_VAR, "bf16")
    assert resolve_precision(None) == "bf16"


def test_a_bad_precision_is_named(monkeypatch):
    monkeypatch.setenv(PRECISION_ENV_VAR, "int4")
    with pytest.raises(EmbeddingsConfigError, match=rf"\${PRECISION_ENV_VAR} 'int4'.*auto"):
        resolve_precision(None)
    with pytest.raises(EmbeddingsConfigError, match="precision 'half'"):
        resolve_precision("half")


@pytest.mark.parametrize("native", [True, False])
def test_int8_is_chosen_only_when_asked(monkeypatch, native):
    # opt-in: auto never picks it (an extra, a one-time graph build, slightly lower quality)
    monkeypatch.setattr(embeddings_module, "bf16_supported", lambda: native)
    monkeypatch.delenv(PRECISION_ENV_VAR, raising=False)
    assert resolve_precision(None) != "int8"
    assert resolve_precision("int8") == resolve_precision(" INT8 ") == "int8"
    monkeypatch.setenv(PRECISION_ENV_VAR, "int8")
    assert resolve_precision(None) == "int8"
    with pytest.raises(EmbeddingsConfigError, match="int8 runs on the CPU"):
        resolve_precision(None, device="cuda")


def test_other_models_are_named_as_they_report():
    assert vectors_made_with(NamedConcepts("text-embedding-3-small")) == "text-embedding-3-small"
    assert vectors_made_with(ConceptEmbeddings()) is None  # reports no name: nothing recorded


@needs_model
@pytest.mark.parametrize("runtime", ["openvino", "torch"])
def test_both_precisions_make_the_same_vectors_within_bf16_rounding(runtime):
    if runtime == "torch":
        pytest.importorskip("sentence_transformers")
    texts = [
        "The late fee is five euros per day.",
        "Boundary layer transition on a swept wing at supersonic speed.",
        "Which plan pays for a doctor outside the network?",
    ]
    fp32 = LocalEmbeddings(precision="fp32", runtime=runtime)
    bf16 = LocalEmbeddings(precision="bf16", runtime=runtime)
    # OpenVINO runs bf16 only on a CPU that has it, and then says so; torch emulates it
    ran_bf16 = runtime == "torch" or embeddings_module.bf16_supported()
    assert (fp32.precision, bf16.precision) == ("fp32", "bf16" if ran_bf16 else "fp32")
    assert vectors_made_with(bf16) == ("local@bf16" if ran_bf16 else "local@fp32")
    assert vectors_made_with(fp32) == "local@fp32"
    a = np.asarray(fp32.embed_documents(texts))
    b = np.asarray(bf16.embed_documents(texts))
    assert np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-3)
    cosines = np.sum(a * b, axis=1)
    assert cosines.min() > 0.99, cosines  # measured 0.999+ (benchmarks/README.md)
    if ran_bf16:
        assert not np.array_equal(a, b)  # bf16 really ran: its rounding shows
    # the nearest passage of a query is the same either way
    query = fp32.embed_query("how much is the fine for returning late")
    assert int(np.argmax(a @ query)) == int(np.argmax(b @ query)) == 0


@needs_model
def test_int8_without_openvino_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)  # as if not installed
    with pytest.raises(LocalEmbeddingsUnavailableError, match=r"OpenVINO.*pip install 'openvino"):
        LocalEmbeddings(precision="int8")


@needs_model
@needs_openvino
@pytest.mark.slow
def test_int8_makes_the_models_vectors_and_builds_its_graph_once(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path))
    texts = [
        "The late fee is five euros per day.",
        "Boundary layer transition on a swept wing at supersonic speed.",
        "Which plan pays for a doctor outside the network?",
    ]
    embeddings_module._graph_loading.cache_clear()  # loaded once per process: load it here
    int8 = LocalEmbeddings(precision="int8")
    assert int8.precision == "int8" and vectors_made_with(int8) == "local@int8"
    int8.ready()  # the graph loads on a thread
    graphs = list((tmp_path / "models").glob("*int8*/model.xml"))
    assert len(graphs) == 1 and graphs[0].with_suffix(".bin").stat().st_size > 10_000_000
    a = np.asarray(LocalEmbeddings(precision="fp32").embed_documents(texts))
    b = np.asarray(int8.embed_documents(texts))
    assert np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-3)
    cosines = np.sum(a * b, axis=1)
    assert cosines.min() > 0.98, cosines  # measured 0.998 on average (benchmarks/README.md)
    assert not np.allclose(a, b, atol=1e-3)  # int8 really ran: its rounding shows
    query = int8.embed_query("how much is the fine for returning late")
    assert int(np.argmax(a @ query)) == int(np.argmax(b @ query)) == 0
    assert int8.embed_documents([]) == []
    # OpenVINO ran without its usage telemetry
    assert "openvino_telemetry" not in sys.modules

    # a second model object (another process alike) reuses the graph: nothing is rebuilt
    def no_build(*_args):
        raise AssertionError("the cached graph was rebuilt")

    monkeypatch.setattr(encoder_module, "_build", no_build)
    again = LocalEmbeddings(precision="int8")
    assert np.allclose(np.asarray(again.embed_documents(texts)), b, atol=1e-5)


@pytest.mark.parametrize("explicit", [True, False])
def test_the_int8_graph_lives_in_the_librarys_cache_directory(monkeypatch, tmp_path, explicit):
    # the int8 graph and the knowledge bases share the library's cache directory
    pytest.importorskip("openvino")  # the graph's name carries OpenVINO's version
    if explicit:
        monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "cache"))
    else:
        monkeypatch.delenv(CACHE_ENV_VAR, raising=False)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    model_dir = tmp_path / "model"
    write(model_dir / "config.json", "{}")
    path = embeddings_module.graph_path(model_dir)
    assert path.parent.parent == default_cache_dir() / "models"
    assert path.name == "model.xml" and path.parent.name.startswith("model-int8-")


class PrecisionConcepts(LocalEmbeddings):
    """The local model's type with the concept fake's vectors: no weights loaded."""

    def __init__(self, precision: str) -> None:
        self.precision = precision  # type: ignore[assignment]
        self._concepts = ConceptEmbeddings()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._concepts.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self._concepts.embed_query(text)


async def test_the_index_and_the_manifest_record_how_vectors_were_made(tmp_path, caplog):
    write(tmp_path / "docs" / "car.txt", "The car needs new tires.")
    kb = KnowledgeBaseDirectory(tmp_path / "kb").create(name="kb")
    kb.add_or_update_source("s", embeddings=True)
    kb.index("s", [tmp_path / "docs"], embeddings=PrecisionConcepts("bf16"))
    manifest_path = tmp_path / "kb" / "knowledge-base.json"
    entry = json.loads(manifest_path.read_text())["sources"][0]
    assert entry["embedding_model"] == "local" and entry["vectors_made_with"] == ["local@bf16"]
    assert kb.open_source("s").store.recorded_vectors_made_with() == ("local@bf16",)
    kb.close()

    # a machine without bf16 adds fp32 vectors of the same model to the same index: both are
    # recorded, nothing is refused or re-embedded (measured equivalent), search finds both
    write(tmp_path / "docs" / "fee.txt", "The late fee is five euros.")
    kb = KnowledgeBaseDirectory(tmp_path / "kb").load()
    with caplog.at_level(logging.INFO, logger="agentic_retrieval.kb"):
        report = kb.index("s", [tmp_path / "docs"], embeddings=PrecisionConcepts("fp32"))
    assert "holds vectors made with local@bf16; its queries are embedded with local@fp32" in (
        caplog.text
    )
    assert report.indexed == [str(tmp_path / "docs" / "fee.txt")]
    entry = json.loads(manifest_path.read_text())["sources"][0]
    assert entry["vectors_made_with"] == ["local@bf16", "local@fp32"]
    source = kb.open_source("s")
    hits = await source.search(SearchQuery(text="automobile price", top=5))
    assert {h.doc_key for h in hits} == {"docs-car-txt-0", "docs-fee-txt-0"}
    kb.close()


def test_lexical_writes_and_unnamed_models_record_nothing(tmp_path):
    write(tmp_path / "docs" / "car.txt", "The car needs new tires.")
    kb = KnowledgeBaseDirectory(tmp_path / "kb").create(name="kb")
    kb.add_or_update_source("plain")
    kb.index("plain", [tmp_path / "docs"])
    kb.add_or_update_source("unnamed", embeddings=True)
    kb.index("unnamed", [tmp_path / "docs"], embeddings=ConceptEmbeddings())
    for entry in json.loads((tmp_path / "kb" / "knowledge-base.json").read_text())["sources"]:
        assert "vectors_made_with" not in entry
    assert kb.open_source("unnamed").store.recorded_vectors_made_with() == ()
    kb.close()


@pytest.mark.parametrize(
    "value", ["local@bf16", [1], ["x" * 257], [""], [f"m{i}" for i in range(17)]]
)
def test_a_malformed_record_in_the_manifest_is_refused(tmp_path, value):
    kb = KnowledgeBaseDirectory(tmp_path / "kb").create(name="kb")
    kb.add_or_update_source("s", embeddings=True)
    manifest_path = tmp_path / "kb" / "knowledge-base.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["sources"][0]["vectors_made_with"] = value
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(KnowledgeBaseDirectoryError, match="vectors_made_with must be a list"):
        KnowledgeBaseDirectory(tmp_path / "kb").load()
