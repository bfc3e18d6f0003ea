"""Records files are indexed as they are read: memory stays flat in the file's size (issue 21)."""

from __future__ import annotations

import csv
import json
import random
import tracemalloc
from pathlib import Path

import pytest
from tests.fakes import write

from agentic_retrieval.sources.local import LocalKnowledgeSource, ingest, record_ingest, records
from agentic_retrieval.sources.local.ingest import IndexProgress
from agentic_retrieval.sources.local.records import RecordFields, RecordsFile

WORDS = "tram ferry harbour ticket river bridge station museum garden tower".split()


def corpus(count: int, seed: int = 7) -> list[dict[str, object]]:
    """``count`` records of about 4.5 KB of text each (distinct, so none is deduplicated)."""
    rng = random.Random(seed)
    return [
        {
            "id": f"r{n}",
            "title": f"Record {n}",
            "text": " ".join(rng.choice(WORDS) for _ in range(700)) + f". Number {n}.",
            "year": 1900 + n % 100,
        }
        for n in range(count)
    ]


def write_records(path: Path, rows: list[dict[str, object]]) -> Path:
    if path.suffix == ".json":
        path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    elif path.suffix == ".csv":
        with path.open("w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=["id", "title", "text", "year"])
            writer.writeheader()
            writer.writerows(rows)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def peak_python_memory(tmp: Path, path: Path) -> int:
    """Peak bytes of Python objects while ``path`` is indexed into a new store.

    Python's own allocations (tracemalloc), not the RSS: SQLite's page cache (bounded by the
    store, and growing with the database up to that bound) and the allocator's arenas make
    the RSS of small runs noisy, while what used to grow with the file - the records held in
    a list - is all Python objects. The RSS at scale is measured by
    benchmarks/bench_scale_retrieve.py.
    """
    source = LocalKnowledgeSource("s", tmp / f"{path.name}.sqlite", create=True)
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        baseline = tracemalloc.get_traced_memory()[0]
        report = source.index_records(path)
        peak = tracemalloc.get_traced_memory()[1] - baseline
    finally:
        if started:
            tracemalloc.stop()
        source.close()
    assert not report.failed and report.total_chunks > len(report.indexed)
    return peak


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_indexing_a_records_file_holds_a_batch_not_the_file(tmp_path, monkeypatch, suffix):
    # batches small enough that both files span many (the defaults: 1,024 records, 16 MiB)
    monkeypatch.setattr(ingest, "WRITE_BATCH_FILES", 16)
    monkeypatch.setattr(ingest, "WRITE_BATCH_BYTES", 256 * 1024)
    monkeypatch.setattr(record_ingest, "EMBED_BATCH", 16)
    rows = corpus(400)
    small = write_records(tmp_path / f"small{suffix}", rows[:100])
    large = write_records(tmp_path / f"large{suffix}", rows)
    grown = large.stat().st_size - small.stat().st_size
    assert grown > 1_300_000  # what holding the whole file would add, at the least

    small_peak = peak_python_memory(tmp_path, small)
    large_peak = peak_python_memory(tmp_path, large)
    # 4x the records: only their ids (the run's report, the stale-record check) may add up
    assert large_peak - small_peak < 400_000, (small_peak, large_peak)
    assert large_peak < 8 * 256 * 1024 + 2_000_000


def test_progress_is_estimated_from_the_bytes_read(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "_JSON_READ_CHARS", 4096)
    path = write_records(tmp_path / "r.jsonl", corpus(40))
    events: list[IndexProgress] = []
    source = LocalKnowledgeSource("s", tmp_path / "s.sqlite", create=True)
    try:
        source.index_records(path, progress=events.append)
    finally:
        source.close()
    assert [e.done for e in events] == list(range(1, 41))
    assert all(e.done <= e.total for e in events)
    assert events[-1].total == 40
    # the estimate is about right half-way (records are of similar size)
    assert 30 <= events[19].total <= 56


def test_records_file_reports_its_size_and_position(tmp_path):
    path = write_records(tmp_path / "r.jsonl", corpus(20))
    stream = RecordsFile(path, RecordFields())
    assert stream.size == path.stat().st_size and stream.bytes_read == 0
    reader = iter(stream)
    next(reader)
    assert 0 < stream.bytes_read <= stream.size
    assert len(list(reader)) == 19
    assert stream.bytes_read == stream.size


def test_a_missing_or_unknown_file_is_refused_before_reading(tmp_path):
    with pytest.raises(records.RecordError, match="no such records file"):
        RecordsFile(tmp_path / "missing.jsonl", RecordFields())
    with pytest.raises(records.RecordError, match="unknown records format"):
        RecordsFile(write(tmp_path / "a.txt", "x"), RecordFields())


def read(path: Path) -> list[tuple[str, object]]:
    return [
        (where, item.reason if isinstance(item, records.RecordFailure) else item.id)
        for where, item in records.read_records(path, RecordFields())
    ]


@pytest.mark.parametrize("window", [1, 7, 4096])
def test_json_arrays_are_parsed_element_by_element(tmp_path, monkeypatch, window):
    monkeypatch.setattr(records, "_JSON_READ_CHARS", window)
    text = (
        '\ufeff [ {"id": 1, "text": "a"},\n\t{"id": "two", "text": "' + "b" * 300 + '"} ,'
        '{"id": 3, "text": "c", "n": 12345678901234567890, "x": [1, {"y": null}]}, 17 ]  \n'
    )
    path = write(tmp_path / "a.json", text)
    assert read(path) == [
        ("a.json:1", "1"),
        ("a.json:2", "two"),
        ("a.json:3", "3"),
        ("a.json:4", "a record must be an object, not int"),
    ]
    assert read(write(tmp_path / "empty.json", " [ ] ")) == []


def test_a_broken_json_array_keeps_the_elements_before_the_break(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "_JSON_READ_CHARS", 16)
    broken = write(tmp_path / "b.json", '[{"id": 1, "text": "a"}, {"id": 2, "text": "b" oops]')
    (first, ok), (second, reason) = read(broken)
    assert (first, ok) == ("b.json:1", "1") and second == "b.json:2"
    assert str(reason).startswith("invalid JSON") and "not read" in str(reason)
    missing_comma = write(tmp_path / "c.json", '[{"id": 1, "text": "a"} {"id": 2}]')
    assert read(missing_comma)[1] == (
        "c.json:2",
        "invalid JSON (expected ',' or ']' after element 1, found '{')",
    )
    unterminated = write(tmp_path / "d.json", '[{"id": 1, "text": "a"}, ')
    assert read(unterminated)[1][1].startswith("invalid JSON")  # type: ignore[union-attr]
    trailing = write(tmp_path / "e.json", '[{"id": 1, "text": "a"}] [')
    assert read(trailing) == [
        ("e.json:1", "1"),
        ("e.json:2", "invalid JSON (data after the array's end)"),
    ]
    with pytest.raises(records.RecordError, match="must hold an array"):
        read(write(tmp_path / "f.json", ""))


def test_a_json_array_element_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "_JSON_READ_CHARS", 64)
    monkeypatch.setattr(records, "MAX_JSON_ELEMENT_CHARS", 1000)
    path = write(
        tmp_path / "big.json",
        '[{"id": 1, "text": "' + "a" * 900 + '"}, {"id": 2, "text": "' + "b" * 5000 + '"}]',
    )
    (_, ok), (second, reason) = read(path)
    assert ok == "1" and second == "big.json:2"
    assert "an element longer than 1,000 characters" in str(reason)


def test_a_jsonl_line_that_is_not_utf8_fails_alone(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(
        b'\xef\xbb\xbf{"id": 1, "text": "a"}\n{"id": 2, "text": "\xff"}\r\n{"id": 3, "text": "c"}'
    )
    found = read(path)
    assert [where for where, _ in found] == ["mixed.jsonl:1", "mixed.jsonl:2", "mixed.jsonl:3"]
    assert found[0][1] == "1" and found[2][1] == "3"
    assert str(found[1][1]).startswith("not UTF-8")


def test_a_csv_row_with_a_cell_past_the_csv_limit_fails_alone(tmp_path):
    # the limit is process-wide (file conversion raises it for uploaded CSV): past it, whatever
    beyond = csv.field_size_limit() + 1
    path = write(tmp_path / "big.csv", "id,text\na," + "x" * beyond + "\nb,fine\n")
    found = read(path)
    assert found[0][0] == "big.csv:2" and "field larger than field limit" in str(found[0][1])
    assert found[1] == ("big.csv:3", "b")
    with pytest.raises(records.RecordError, match="unreadable header row"):
        read(write(tmp_path / "head.csv", "id," + "t" * beyond + "\na,b\n"))
