"""Incremental indexing into the local store: exact chunk ids after each step."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from tests.fakes import write

from agentic_retrieval.errors import LoaderError
from agentic_retrieval.sources.local import IndexProgress, LocalStore, index_paths
from agentic_retrieval.sources.local import ingest as ingest_module
from agentic_retrieval.sources.local.loaders import load_file
from agentic_retrieval.sources.local.store import schema as store_schema


def make_pdf(pages: list[str]) -> bytes:
    """A minimal valid PDF with one line of Helvetica text per page."""
    objects: list[bytes] = []
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    font_id = 3 + 2 * len(pages)
    for i, text in enumerate(pages):
        content_id = 4 + 2 * i
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {content_id} 0 R "
            f"/Resources << /Font << /F1 {font_id} 0 R >> >> >>".encode()
        )
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    s = LocalStore(tmp_path / "index.sqlite", create=True)
    yield s
    s.close()


def para(word: str, n: int) -> str:
    """n sentences of 30 characters each mentioning ``word``."""
    return " ".join(f"{word} sentence number {i:04d}." for i in range(n))


def test_incremental_reindex_add_change_delete_unchanged(tmp_path: Path, store: LocalStore):
    docs = tmp_path / "docs"
    write(docs / "a.txt", "Alpha notes\n\n" + para("alpha", 3))
    write(docs / "sub" / "B File.md", "# Bravo\n\n" + para("bravo", 3))
    write(
        docs / "c.html",
        "<html><head><title>Charlie</title></head><body><p>"
        + para("charlie", 3)
        + "</p><script>var x = 1;</script></body></html>",
    )

    first = index_paths(store, [docs], chunk_size=200, overlap=0)
    assert sorted(Path(p).name for p in first.indexed) == ["B File.md", "a.txt", "c.html"]
    assert store.chunk_ids() == ["docs-a-txt-0", "docs-c-html-0", "docs-sub-b-file-md-0"]
    assert first.chunks_written == 3 and first.total_chunks == 3

    # change a.txt (now 3 chunks), delete the markdown file, add d.txt, leave c.html alone
    write(docs / "a.txt", "Alpha notes\n\n" + para("alpha", 15))
    (docs / "sub" / "B File.md").unlink()
    write(docs / "d.txt", para("delta", 2))
    second = index_paths(store, [docs], chunk_size=200, overlap=0)
    assert [Path(p).name for p in second.indexed] == ["a.txt", "d.txt"]
    assert [Path(p).name for p in second.unchanged] == ["c.html"]
    assert [Path(p).name for p in second.deleted] == ["B File.md"]
    assert second.chunks_deleted == 1
    assert store.chunk_ids() == [
        "docs-a-txt-0",
        "docs-a-txt-1",
        "docs-a-txt-2",
        "docs-c-html-0",
        "docs-d-txt-0",
    ]

    third = index_paths(store, [docs], chunk_size=200, overlap=0)
    assert third.indexed == [] and third.deleted == [] and len(third.unchanged) == 3
    assert third.total_chunks == 5


def test_titles_and_chunk_metadata(tmp_path: Path, store: LocalStore):
    write(tmp_path / "kb" / "guide.md", "intro line\n\n## Leave policy ##\n\nTake leave.")
    write(tmp_path / "kb" / "page.html", "<body><h1>Main <b>Heading</b></h1><p>Body.</p></body>")
    write(tmp_path / "kb" / "notes_about-things.txt", "This first line is a sentence.\nMore.")
    index_paths(store, [tmp_path / "kb"], metadata={"dept": "hr", "year": 2024})
    hits = {h.id: h for h in store.search("", top=10)}
    assert {k: h.title for k, h in hits.items()} == {
        "kb-guide-md-0": "Leave policy",
        "kb-notes-about-things-txt-0": "notes about things",
        "kb-page-html-0": "Main Heading",
    }
    meta = hits["kb-guide-md-0"].metadata
    assert meta == {
        "dept": "hr",
        "year": 2024,
        "chunk": 0,
        "title": "Leave policy",
        "file_name": "guide.md",
        "source_path": str((tmp_path / "kb" / "guide.md").resolve()),
    }
    assert "var" not in hits["kb-page-html-0"].content


def test_pdf_pages_are_kept_per_chunk(tmp_path: Path, store: LocalStore):
    (tmp_path / "manual.pdf").write_bytes(make_pdf(["Boiler pressure guide", "Valve reset steps"]))
    report = index_paths(store, [tmp_path / "manual.pdf"])
    assert report.failed == []
    hits = store.search("valve reset", top=5)
    assert [(h.id, h.page, h.metadata["page"]) for h in hits] == [("manual-pdf-1", 2, 2)]
    assert store.search("", top=5)[0].content == "Boiler pressure guide"


def test_unreadable_files_are_reported_and_skipped(
    tmp_path: Path, store: LocalStore, monkeypatch: pytest.MonkeyPatch
):
    docs = tmp_path / "docs"
    write(docs / "good.txt", "Readable text about turbines.")
    (docs / "corrupt.pdf").write_bytes(b"%PDF-1.4\nthis is not really a pdf\n%%EOF")
    (docs / "binary.txt").write_bytes(b"\x00\x01\x02ELF\x00" * 100)
    write(docs / "locked.md", "# Locked\n\nSecret.")
    (docs / "picture.png").write_bytes(b"\x89PNG\r\n")
    write(docs / "empty.txt", "   \n")
    explicit = write(tmp_path / "report.rtf", "not supported")

    real_read = ingest_module.read_regular_file

    def read(path: Path, **kwargs):
        if path.name == "locked.md":
            raise PermissionError(13, "Permission denied", str(path))
        return real_read(path, **kwargs)

    monkeypatch.setattr(ingest_module, "read_regular_file", read)
    report = index_paths(store, [docs, explicit, tmp_path / "missing.txt"])
    reasons = {Path(f.path).name: f.reason for f in report.failed}
    assert sorted(reasons) == [
        "binary.txt",
        "corrupt.pdf",
        "empty.txt",
        "locked.md",
        "missing.txt",
        "report.rtf",
    ]
    assert "binary" in reasons["binary.txt"]
    assert "unreadable PDF" in reasons["corrupt.pdf"]
    assert "Permission denied" in reasons["locked.md"]
    assert "unsupported file type" in reasons["report.rtf"]
    assert reasons["missing.txt"] == "file not found"
    assert reasons["empty.txt"] == "no extractable text"
    assert [Path(p).name for p in report.ignored] == ["picture.png"]
    assert store.chunk_ids() == ["docs-good-txt-0"]
    assert not report.ok


def test_explicit_file_deleted_from_disk_is_removed(tmp_path: Path, store: LocalStore):
    note = write(tmp_path / "note.txt", "Remember the milk.")
    index_paths(store, [note])
    assert store.chunk_ids() == ["note-txt-0"]
    note.unlink()
    report = index_paths(store, [note])
    assert report.deleted == [str(note.resolve())]
    assert store.chunk_ids() == []


def test_metadata_change_reindexes_and_is_filterable(tmp_path: Path, store: LocalStore):
    from agentic_retrieval.odata import parse_filter

    note = write(tmp_path / "note.txt", "Quarterly revenue grew.")
    index_paths(store, [note], metadata={"tags": ["finance"]})
    again = index_paths(store, [note], metadata={"tags": ["finance", "q3"]})
    assert len(again.indexed) == 1
    hits = store.search("revenue", filter_expr=parse_filter("tags/any(t: t eq 'q3')"))
    assert [h.id for h in hits] == ["note-txt-0"]
    assert store.search("revenue", filter_expr=parse_filter("tags/any(t: t eq 'q4')")) == []


@pytest.mark.parametrize("bad", [{"source_path": "x"}, {"bad-name": 1}, {"when": object()}])
def test_invalid_metadata_is_rejected(tmp_path: Path, store: LocalStore, bad: dict):
    with pytest.raises(ValueError):
        index_paths(store, [write(tmp_path / "a.txt", "text")], metadata=bad)


def test_slug_collision_gets_a_path_hash_suffix(tmp_path: Path, store: LocalStore):
    write(tmp_path / "x" / "docs" / "a.txt", "first copy")
    write(tmp_path / "y" / "docs" / "a.txt", "second copy")
    index_paths(store, [tmp_path / "x" / "docs"])
    index_paths(store, [tmp_path / "y" / "docs"])
    second = str((tmp_path / "y" / "docs" / "a.txt").resolve())
    suffix = hashlib.sha1(second.encode()).hexdigest()[:6]
    # the second folder's file is disambiguated; indexing it did not delete the first one
    assert store.chunk_ids() == ["docs-a-txt-0", f"docs-a-txt-{suffix}-0"]


def test_progress_reports_every_file(tmp_path: Path, store: LocalStore):
    write(tmp_path / "d" / "a.txt", "one")
    write(tmp_path / "d" / "b.txt", "two")
    events: list[IndexProgress] = []
    index_paths(store, [tmp_path / "d"], progress=events.append)
    assert [(e.done, e.total, Path(e.path).name, e.status) for e in events] == [
        (1, 2, "a.txt", "indexed"),
        (2, 2, "b.txt", "indexed"),
    ]


def test_interrupted_write_leaves_previous_version(
    tmp_path: Path, store: LocalStore, monkeypatch: pytest.MonkeyPatch
):
    note = write(tmp_path / "n" / "note.txt", para("old", 2))
    index_paths(store, [tmp_path / "n"], chunk_size=100, overlap=0)
    assert store.chunk_ids() == ["n-note-txt-0"]

    write(tmp_path / "n" / "note.txt", para("new", 9))

    def crash(conn: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(store_schema, "bump_generation", crash)
    with pytest.raises(KeyboardInterrupt):
        index_paths(store, [tmp_path / "n"], chunk_size=100, overlap=0)
    monkeypatch.undo()
    assert store.chunk_ids() == ["n-note-txt-0"]
    assert "old sentence" in store.search("old", top=1)[0].content
    report = index_paths(store, [tmp_path / "n"], chunk_size=100, overlap=0)
    assert report.indexed == [str(note.resolve())]
    assert store.chunk_ids() == [f"n-note-txt-{i}" for i in range(3)]


def test_loader_rejects_unknown_extension() -> None:
    with pytest.raises(LoaderError):
        load_file(Path("x.docx"), b"data")


def test_cp1252_text_is_decoded() -> None:
    doc = load_file(Path("legacy.txt"), "Café menu\n\nCrème brûlée".encode("cp1252"))
    assert doc.title == "Café menu"
    assert "Crème brûlée" in doc.sections[0].text


# --- hostile folders: links, FIFOs, special and oversized files -------------------------------

needs_posix = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX links and FIFOs")


@needs_posix
def test_links_out_of_the_folder_are_skipped_and_reported(tmp_path: Path, store: LocalStore):
    secret = write(tmp_path / "outside" / "secret.txt", "root:x:0:0:the password file")
    docs = tmp_path / "docs"
    write(docs / "fares.txt", "Bike fares cost one dollar.")
    (docs / "passwd.txt").symlink_to(secret)
    (docs / "alias.txt").symlink_to(docs / "fares.txt")  # inside: the same file
    (docs / "outside-folder").symlink_to(tmp_path / "outside")
    (docs / "loop.txt").symlink_to(docs / "loop.txt")
    report = index_paths(store, [docs])
    assert store.chunk_ids() == ["docs-fares-txt-0"]
    assert store.search("password", top=5) == []
    assert {Path(f.path).name: f.reason for f in report.skipped} == {
        "passwd.txt": f"a link leading out of {docs.resolve()}",
        "outside-folder": "a link to a folder is not followed",
        "loop.txt": "cannot read: a loop of links",
    }
    assert report.failed == []


@needs_posix
def test_fifos_are_skipped_not_waited_on(tmp_path: Path, store: LocalStore):
    docs = tmp_path / "docs"
    write(docs / "fares.txt", "Bike fares cost one dollar.")
    os.mkfifo(docs / "pipe.txt")  # reading it would block until a writer appears
    report = index_paths(store, [docs])
    assert [(Path(f.path).name, f.reason) for f in report.skipped] == [
        ("pipe.txt", "not a regular file (a FIFO)")
    ]
    named = index_paths(store, [docs / "pipe.txt"])  # named explicitly: a failure, no hang
    assert [(Path(f.path).name, f.reason) for f in named.failed] == [
        ("pipe.txt", "not a regular file (a FIFO)")
    ]
    assert store.chunk_ids() == ["docs-fares-txt-0"]


@needs_posix
def test_a_file_swapped_for_a_fifo_after_listing_does_not_hang(tmp_path: Path):
    path = tmp_path / "late.txt"
    os.mkfifo(path)
    with pytest.raises(LoaderError, match="not a regular file"):
        ingest_module.read_regular_file(path, follow_links=False)


def test_files_over_the_size_limit_fail_without_being_read(
    tmp_path: Path, store: LocalStore, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(ingest_module, "MAX_FILE_BYTES", 1024 * 1024)
    docs = tmp_path / "docs"
    write(docs / "huge.txt", "word " * 300_000)
    write(docs / "small.txt", "Bike fares cost one dollar.")
    report = index_paths(store, [docs])
    assert [(Path(f.path).name, f.reason) for f in report.failed] == [
        ("huge.txt", "larger than 1 MiB")
    ]
    assert store.chunk_ids() == ["docs-small-txt-0"]
