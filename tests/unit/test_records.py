"""Record ingestion: JSONL / CSV / dicts / LangChain Documents into the local store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.documents import Document
from tests.fakes import ConceptEmbeddings, write
from typer.testing import CliRunner

from agentic_retrieval.cli import app
from agentic_retrieval.errors import RecordError
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.sources.base import SearchQuery
from agentic_retrieval.sources.local import LocalKnowledgeSource
from agentic_retrieval.sources.local.records import RecordFields, typed_cell

runner = CliRunner()

BEIR_CORPUS = [
    {"_id": "d1", "title": "Tram fares", "text": "A single tram ride costs 2 euros."},
    {"_id": "d2", "title": "Bike docks", "text": "Bikes must be docked within 30 minutes."},
    {"_id": "d3", "title": "", "text": "Lost items are kept for 30 days.", "metadata": {"y": 1}},
]


def jsonl(path: Path, rows: list[dict]) -> Path:
    return write(path, "".join(json.dumps(row) + "\n" for row in rows))


@pytest.fixture
def source(tmp_path):
    opened = LocalKnowledgeSource("s", tmp_path / "s.sqlite", create=True)
    yield opened
    opened.close()


async def keys(source: LocalKnowledgeSource, text: str, filter: str | None = None) -> list[str]:
    return [h.doc_key for h in await source.search(SearchQuery(text=text, filter=filter))]


async def test_a_beir_corpus_indexes_with_no_options(tmp_path, source):
    corpus = jsonl(tmp_path / "corpus.jsonl", BEIR_CORPUS)
    report = source.index_records(corpus)
    assert report.indexed == ["d1", "d2", "d3"] and report.failed == []
    assert await keys(source, "tram ride") == ["d1#0"]
    hit = (await source.search(SearchQuery(text="lost items")))[0]
    assert hit.metadata == {"record_id": "d3", "title": "", "chunk": 0, "metadata": {"y": 1}}
    assert hit.title is None and hit.content == "Lost items are kept for 30 days."
    assert await keys(source, "*", "metadata/y eq 1") == ["d3#0"]
    assert source.store.document_keys() == {"d1", "d2", "d3"}


async def test_reindexing_is_incremental_and_drops_records_gone_from_the_file(tmp_path, source):
    corpus = jsonl(tmp_path / "corpus.jsonl", BEIR_CORPUS)
    source.add_documents([{"id": "manual", "text": "added by hand about trams"}])
    source.index_records(corpus)
    again = source.index_records(corpus)
    assert again.indexed == [] and again.unchanged == ["d1", "d2", "d3"]

    changed = [dict(BEIR_CORPUS[0], text="A single tram ride costs 3 euros."), BEIR_CORPUS[2]]
    jsonl(corpus, changed)
    report = source.index_records(corpus)
    assert report.indexed == ["d1"] and report.unchanged == ["d3"] and report.deleted == ["d2"]
    assert await keys(source, "docked") == []
    assert "3 euros" in (await source.search(SearchQuery(text="tram ride")))[0].content
    # records added from elsewhere are not the file's to delete
    assert await keys(source, "added by hand") == ["manual#0"]


async def test_a_malformed_line_never_deletes_the_record_it_held(tmp_path, source):
    corpus = jsonl(tmp_path / "corpus.jsonl", BEIR_CORPUS)
    source.index_records(corpus)
    lines = corpus.read_text().splitlines()
    lines[1] = '{"_id": "d2", "title": "Bike docks", broken'  # d2's line, mid-edit
    write(corpus, "\n".join(lines) + "\n")
    report = source.index_records(corpus)
    assert report.deleted == [] and report.unchanged == ["d1", "d3"]
    assert [f.path for f in report.failed] == ["corpus.jsonl:2"] and report.kept == ["d2"]
    assert await keys(source, "docked") == ["d2#0"]
    # once the file reads cleanly, what it no longer holds goes
    write(corpus, "\n".join([lines[0], lines[2]]) + "\n")
    assert source.index_records(corpus).deleted == ["d2"]
    assert await keys(source, "docked") == []


async def test_metadata_fields_are_typed_and_filterable_from_csv(tmp_path, source):
    table = write(
        tmp_path / "products.csv",
        "sku,name,description,price,in_stock,zip\n"
        "A-1,Red kettle,A red electric kettle.,29.90,true,01234\n"
        "B-2,Blue mug,A blue ceramic mug.,7,false,\n"
        "C-3,Green mug,,,true,\n",
    )
    fields = RecordFields.of("sku", "name", "description")
    report = source.index_records(table, fields=fields)
    assert report.indexed == ["A-1", "B-2", "C-3"]  # C-3: the title is its text
    assert await keys(source, "mug", "price lt 10") == ["B-2#0"]
    assert await keys(source, "*", "in_stock eq true and price ge 20") == ["A-1#0"]
    kettle = (await source.search(SearchQuery(text="kettle")))[0]
    assert kettle.metadata["zip"] == "01234" and kettle.metadata["price"] == 29.9
    assert kettle.title == "Red kettle"


def test_typed_cells():
    assert [typed_cell(v) for v in ("7", "-2.5", "1e3", "TRUE", "007", "12 kg", "0")] == [
        7,
        -2.5,
        1000.0,
        True,
        "007",
        "12 kg",
        0,
    ]


def test_bad_records_are_reported_with_their_line_and_the_rest_is_indexed(tmp_path, source):
    path = write(
        tmp_path / "mixed.jsonl",
        '{"_id": "ok", "text": "fine"}\n'
        "{not json\n"
        '{"text": "no id here"}\n'
        '{"_id": "empty", "text": "  "}\n'
        '{"_id": "ok", "text": "again"}\n'
        '{"_id": "bad-field", "text": "x", "unit price": 3}\n'
        '{"_id": "reserved", "text": "x", "record_id": "y"}\n'
        "[1, 2]\n",
    )
    report = source.index_records(path)
    assert report.indexed == ["ok"]
    reasons = {f.path: f.reason for f in report.failed}
    assert list(reasons) == [f"mixed.jsonl:{n}" for n in (2, 3, 4, 5, 6, 7, 8)]
    assert reasons["mixed.jsonl:2"].startswith("invalid JSON")
    assert reasons["mixed.jsonl:3"] == "no id field (_id or id); the record's fields are: text"
    assert reasons["mixed.jsonl:4"] == "record 'empty' has no text (text or content)"
    assert reasons["mixed.jsonl:5"] == "duplicate id 'ok'"
    assert "['unit price'] cannot be filtered on" in reasons["mixed.jsonl:6"]
    assert "['record_id'] are set by the store" in reasons["mixed.jsonl:7"]
    assert reasons["mixed.jsonl:8"] == "a record must be an object, not list"


def test_unreadable_records_files_raise(tmp_path, source):
    with pytest.raises(RecordError, match="no such records file"):
        source.index_records(tmp_path / "missing.jsonl")
    with pytest.raises(RecordError, match=r"unknown records format '\.xml'"):
        source.index_records(write(tmp_path / "a.xml", "<a/>"))
    with pytest.raises(RecordError, match="must hold an array"):
        source.index_records(write(tmp_path / "a.json", '{"_id": 1}'))


async def test_documents_from_langchain_loaders_and_deletes(tmp_path, source):
    docs = [
        Document("Ferries leave every 40 minutes.", id="ferry", metadata={"kind": "guide"}),
        Document("Parking costs 4 dollars.", metadata={"source": "faq.csv", "row": 2}),
        Document("Harbour hours are 6 to 22.", metadata={"id": 17, "title": "Hours"}),
    ]
    report = source.add_documents(docs, metadata={"team": "ops"})
    assert report.indexed == ["ferry", "faq.csv#row=2", "17"]
    assert await keys(source, "ferries", "kind eq 'guide' and team eq 'ops'") == ["ferry#0"]
    assert (await source.search(SearchQuery(text="harbour hours")))[0].title == "Hours"
    unchanged = source.add_documents(docs, metadata={"team": "ops"})
    assert unchanged.unchanged == ["ferry", "faq.csv#row=2", "17"]
    failed = source.add_documents([Document("no id at all")])
    assert "needs an id" in failed.failed[0].reason

    deleted = source.delete_documents(["ferry", "nope", "ferry"])
    assert deleted.deleted == ["ferry"] and deleted.chunks_deleted == 1
    assert [(f.path, f.reason) for f in deleted.failed] == [("nope", "no record with this id")]
    assert await keys(source, "ferries") == []
    assert source.store.document_keys() == {"faq.csv#row=2", "17"}


async def test_records_are_embedded_in_batches_for_hybrid_search(tmp_path):
    embeddings = ConceptEmbeddings()
    source = LocalKnowledgeSource("s", tmp_path / "h.sqlite", embeddings=embeddings, create=True)
    rows = [{"_id": f"r{i}", "text": f"plain filler record number {i}"} for i in range(100)]
    rows.append({"_id": "car", "text": "The automobile needs new tires."})
    report = source.add_documents(rows)
    assert len(report.indexed) == 101 and embeddings.calls == 2  # batches of 64
    assert source.store.dimension() == 4
    hits = await source.search(SearchQuery(text="vehicle", top=1))
    assert [h.doc_key for h in hits] == ["car#0"]
    source.close()


def test_long_records_are_chunked_and_every_chunk_names_its_record(tmp_path, source):
    sentence = "The tram network has many stops along the harbour front. "
    source.add_documents([{"_id": "long", "title": "Network", "text": sentence * 60}])
    stored = source.store.search("tram network", top=50)
    assert len(stored) > 1
    assert {h.id.rsplit("#", 1)[0] for h in stored} == {"long"}
    assert {h.metadata["record_id"] for h in stored} == {"long"}
    assert sorted(h.metadata["chunk"] for h in stored) == list(range(len(stored)))


def test_cli_indexes_records_with_field_options(tmp_path):
    records = write(
        tmp_path / "products.csv",
        "sku,name,description,price\nA-1,Red kettle,A red kettle.,29.9\nB-2,Blue mug,A mug.,7\n",
    )
    kb_dir = tmp_path / "kb"
    args = ["index", "--kb", str(kb_dir), "--source", "shop", "--records", str(records)]
    fields = ["--id-field", "sku", "--title-field", "name", "--text-field", "description"]
    result = runner.invoke(app, args + fields)
    assert result.exit_code == 0, result.output
    rows = {line.strip("│ ").split("│")[0].strip(): line for line in result.stdout.splitlines()}
    assert "│ 2" in rows["records indexed"] and "│ 0" in rows["records failed"]
    result = runner.invoke(
        app,
        [
            "retrieve",
            "--kb",
            str(kb_dir),
            "--effort",
            "minimal",
            "--filter",
            "price lt 10",
            "--json",
            "mug",
        ],
    )
    references = json.loads(result.stdout)["references"]
    assert [r["docKey"] for r in references] == ["B-2#0"]
    again = runner.invoke(app, args + fields)
    rows = {line.strip("│ ").split("│")[0].strip(): line for line in again.stdout.splitlines()}
    assert "│ 2" in rows["records unchanged (skipped)"]


def test_cli_record_mistakes_are_one_line_and_change_nothing(tmp_path):
    kb_dir = tmp_path / "kb"
    (tmp_path / "folder.jsonl").mkdir()
    base = ["index", "--kb", str(kb_dir), "--source", "s"]
    cases = [
        ([*base, "--records", str(tmp_path / "gone.jsonl")], "no such file"),
        ([*base, "--records", str(write(tmp_path / "r.xml", "x"))], "unknown format '.xml'"),
        (base, "give files or folders to index, or --records FILE"),
        ([*base, "--records", str(tmp_path / "folder.jsonl")], "not a regular file"),
        ([*base, "--embeddings", "nonsense", str(tmp_path)], "use 'local'"),
        ([*base, "--embeddings", "local", "--no-embeddings", str(tmp_path)], "contradict"),
    ]
    for args, message in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not kb_dir.exists()


def test_knowledge_base_directory_indexes_records(tmp_path):
    corpus = jsonl(tmp_path / "corpus.jsonl", BEIR_CORPUS)
    directory = KnowledgeBaseDirectory(tmp_path / "kb").create(name="kb")
    directory.add_or_update_source("c")
    report = directory.index_records("c", corpus)
    assert report.indexed == ["d1", "d2", "d3"]
    directory.close()
