"""The store's vector index: HNSW answers as exact search does, filters apply before top-k,
deletes never come back, and the saved graph is used only when it fits its store.

The size thresholds are lowered so the graph runs on small sets; with ``efSearch`` at least
the number of vectors the graph search is exhaustive, so its results must equal exact ones.
"""

from __future__ import annotations

import json
import shutil
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest

from agentic_retrieval.odata import compile_predicate, parse_filter
from agentic_retrieval.permissions import Access, Identity, Permissions
from agentic_retrieval.sources.local import LocalKnowledgeSource, LocalStore
from agentic_retrieval.sources.local.store import ChunkRecord, FileState, ann, vectors
from agentic_retrieval.sources.local.store.ann import VectorRows
from agentic_retrieval.testing import HashingEmbeddings

faiss = pytest.importorskip("faiss", reason="the ANN index needs faiss-cpu (local extra)")

DIM = 16
FILES = 60
CHUNKS = 5  # per file: 300 vectors


@pytest.fixture
def small_graphs(monkeypatch):
    """The graph from 50 vectors on, exhaustive breadth, exact only for <= 10 allowed."""
    monkeypatch.setattr(ann, "ANN_MIN_VECTORS", 50)
    monkeypatch.setattr(ann, "EXACT_MAX_ALLOWED", 10)
    monkeypatch.setattr(ann, "EF_SEARCH", 512)


def unit(rng: np.random.Generator, count: int) -> np.ndarray:
    return ann.normalised(rng.normal(size=(count, DIM)).astype(np.float32))


def built(data: np.ndarray, labels: np.ndarray) -> VectorRows:
    """Rows holding ``data`` under ``labels``, with their graph built."""
    rows = VectorRows(DIM, use_ann=True)
    rows.add(labels, data)
    rows.build()
    return rows


def exact_top(matrix: np.ndarray, labels: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    scores = matrix @ query
    order = sorted(range(len(labels)), key=lambda i: (-scores[i], labels[i]))
    return [int(labels[i]) for i in order[:k]]


def test_graph_results_equal_exact_ones_on_a_small_set(small_graphs):
    rng = np.random.default_rng(1)
    data = unit(rng, 400)
    labels = np.arange(10, 410)
    graph = VectorRows(DIM, use_ann=True)
    graph.add(labels, data)
    assert graph.wants_graph and graph.graph is None  # built only when asked (off queries)
    graph.build()
    assert graph.graph is not None and not graph.wants_graph
    for query in unit(rng, 30):
        got = [rid for rid, _ in graph.search(query, 10)]
        assert got == exact_top(data, labels, query, 10)


def test_a_filtered_graph_search_equals_brute_force(small_graphs):
    rng = np.random.default_rng(2)
    data = unit(rng, 400)
    labels = np.arange(1, 401)
    graph = built(data, labels)
    for share in (0.5, 0.1, 0.02):  # graph + selector, graph + selector, exact over subset
        allowed = labels[rng.random(400) < share]
        keep = np.isin(labels, allowed)
        for query in unit(rng, 10):
            got = [rid for rid, _ in graph.search(query, 10, allowed)]
            assert got == exact_top(data[keep], labels[keep], query, 10)
            assert len(got) == min(10, len(allowed))


def test_deleted_rows_never_return_and_many_deletes_rebuild(small_graphs):
    rng = np.random.default_rng(3)
    data = unit(rng, 300)
    labels = np.arange(1, 301)
    rows = VectorRows(DIM, use_ann=True).snapshot()
    rows.add(labels, data)
    first = rows.build().graph
    gone = labels[:40]  # 13%: excluded, not rebuilt
    rows.remove(gone)
    assert rows.graph is first and rows.size == 300 and rows.live == 260
    assert not rows.wants_graph
    query = data[5]
    hits = [rid for rid, _ in rows.search(query, 20)]
    assert not set(hits) & set(gone.tolist())
    assert hits == exact_top(data[40:], labels[40:], query, 20)
    rows.remove(labels[40:80])  # 27% dead: a rebuild over the live rows is due
    assert rows.wants_graph
    rebuilt = rows.snapshot().build()
    assert rows.graph is first  # the old rows stay as they were while the new ones build
    rows = rebuilt
    assert rows.graph is not first and rows.size == rows.live == 220
    # a rid written again holds its new vector only
    rows.add([300], data[7:8])
    assert rows.live == 220 and rows.search(data[7], 2)[0][0] == 300
    assert rows.similarities(data[7], np.asarray([300, 1]))[300] == pytest.approx(1.0, abs=1e-5)


def test_new_rows_wait_in_an_exact_tail_until_merged(small_graphs, monkeypatch):
    monkeypatch.setattr(ann, "FRESH_MAX", 60)
    rng = np.random.default_rng(6)
    data = unit(rng, 400)
    labels = np.arange(1, 401)
    rows = built(data[:300], labels[:300])
    rows.add(labels[300:350], data[300:350])  # after the graph: in the tail, searched exactly
    assert (rows.graphed, rows.fresh) == (300, 50)
    allowed = labels[rng.random(400) < 0.5]
    for query in unit(rng, 10):
        assert [r for r, _ in rows.search(query, 10)] == exact_top(
            data[:350], labels[:350], query, 10
        )
        keep = np.isin(labels[:350], allowed)
        assert [r for r, _ in rows.search(query, 10, allowed)] == exact_top(
            data[:350][keep], labels[:350][keep], query, 10
        )
    rows.add(labels[350:], data[350:])  # past FRESH_MAX: a rebuild is due
    assert rows.wants_graph
    rows.merge()
    assert (rows.graphed, rows.fresh) == (400, 0) and not rows.wants_graph
    query = unit(rng, 1)[0]
    assert [r for r, _ in rows.search(query, 10)] == exact_top(data, labels, query, 10)


def test_the_search_breadth_grows_with_the_graph(small_graphs, monkeypatch):
    """A fixed efSearch finds less of the exact top 10 as a graph grows (0.913 at 120k, 0.826
    at 1M): the breadth grows with the graph's size, from EF_SEARCH up to MAX_EF_SEARCH."""
    monkeypatch.setattr(ann, "EF_BASE_SIZE", 100)
    assert ann.ef_search(1) == ann.ef_search(100) == ann.EF_SEARCH
    assert ann.EF_SEARCH < ann.ef_search(400) < ann.ef_search(1_600) <= ann.MAX_EF_SEARCH
    assert ann.ef_search(10**12) == ann.MAX_EF_SEARCH
    asked: list[int] = []
    parameters = faiss.SearchParametersHNSW

    def recorded(**options):
        asked.append(options["efSearch"])
        return parameters(**options)

    monkeypatch.setattr(faiss, "SearchParametersHNSW", recorded)
    rng = np.random.default_rng(9)
    data = unit(rng, 400)
    labels = np.arange(1, 401)
    rows = built(data, labels)
    query = unit(rng, 1)[0]
    assert [r for r, _ in rows.search(query, 10)] == exact_top(data, labels, query, 10)
    assert asked == [ann.ef_search(400)]
    allowed = labels[:100]  # a quarter: the breadth widens by 1/sqrt(1/4)
    rows.search(query, 10, allowed)
    assert asked[-1] == 2 * ann.ef_search(400)


def test_exact_search_over_many_rows_reads_them_in_place(small_graphs, monkeypatch):
    """A broad exact search with a graph computes every row's product where the row lies
    (graph storage, tail) and picks the allowed ones: no gathered copy, same answers."""
    rng = np.random.default_rng(8)
    data = unit(rng, 400)
    labels = np.arange(1, 401)
    rows = built(data[:300], labels[:300])
    rows.add(labels[300:], data[300:])  # a tail beside the graph
    rows.remove(labels[:20])  # and dead rows
    gathered = rows.vectors
    picked: list[int] = []

    def vectors(which: np.ndarray) -> np.ndarray:
        picked.append(len(which))
        return gathered(which)

    monkeypatch.setattr(rows, "vectors", vectors)
    for share in (1.0, 0.5, 0.3, 0.1):
        allowed = labels[20:][rng.random(380) < share]
        keep = np.isin(labels, allowed)
        query = unit(rng, 1)[0]
        got = rows._exact(query, 10, rows.rows_of(allowed))
        assert [rid for rid, _ in got] == exact_top(data[keep], labels[keep], query, 10)
        scores = dict(got)
        for rid in scores:
            assert scores[rid] == pytest.approx(float(data[rid - 1] @ query), abs=1e-5)
    assert picked and max(picked) < 100  # only the 10% subset was gathered


def test_without_faiss_every_search_is_exact(monkeypatch):
    monkeypatch.setattr(ann, "ANN_MIN_VECTORS", 1)
    monkeypatch.setattr(ann, "faiss_available", lambda: False)
    rng = np.random.default_rng(4)
    data = unit(rng, 100)
    rows = VectorRows(DIM)
    rows.add(np.arange(1, 101), data)
    assert rows.graph is None and not rows.wants_graph
    query = unit(rng, 1)[0]
    assert [r for r, _ in rows.search(query, 5)] == exact_top(data, np.arange(1, 101), query, 5)


# ---------------------------------------------------------------------- through the store


def vector_of(key: str, ordinal: int) -> list[float]:
    seed = zlib.crc32(f"{key}/{ordinal}".encode())  # distinct vectors: no ties
    return unit(np.random.default_rng(seed), 1)[0].tolist()


def add_file(store: LocalStore, key: str, vectors_from: str | None = None, **fields) -> None:
    chunks = [
        ChunkRecord(f"{key}-{n}", n, key, f"{key} part {n}", None, {"n": n}) for n in range(CHUNKS)
    ]
    state = FileState(f"/virtual/{key}", key, key, key, 0.0, 10, CHUNKS)
    made = [vector_of(vectors_from or key, n) for n in range(CHUNKS)]
    permissions = fields.pop("permissions", None)
    store.replace_file(state, {}, chunks, made, permissions, fields=fields)


def make_store(path: Path) -> LocalStore:
    store = LocalStore(path, create=True)
    for i in range(FILES):
        add_file(
            store,
            f"f{i:02d}",
            year=2000 + i % 10,
            permissions=Permissions(group_ids=("g1",)) if i % 3 == 0 else Permissions(public=True),
        )
    return store


def brute_force(store: LocalStore, query: np.ndarray, odata: str | None, visible, k: int):
    """Every chunk's cosine in Python, the filter and the permission rule in Python, top k."""
    passes = compile_predicate(odata)
    rows = store._connection().execute(
        "SELECT c.id, c.vector, c.metadata, f.fields, f.access "
        "FROM chunks c JOIN files f ON f.id = c.file_id"
    )
    scored = sorted(
        (-float(np.frombuffer(blob, dtype=np.float32) @ query), cid)
        for cid, blob, meta, fields, access in rows
        if passes({**json.loads(fields), **json.loads(meta)}) and visible(access)
    )
    return [cid for _, cid in scored[:k]]


def dense_ids(store: LocalStore, query, k: int, **options) -> list[str]:
    """The store's dense ranking alone (the text matches nothing, so RRF keeps its order)."""
    vector = query.tolist() if isinstance(query, np.ndarray) else query
    hits = store.search("zzzunmatched", top=k, query_vector=vector, **options)
    return [h.id for h in hits]


@pytest.mark.parametrize(
    ("odata", "access", "visible"),
    [
        # anonymous: public documents (the g1 ones are restricted)
        ("year ge 2003", Access(), lambda a: a == "public"),  # 147 allowed: graph + selector
        ("year eq 2004", Access(), lambda a: a == "public"),  # 20: graph + selector
        ("year eq 2004 and n eq 0", Access(), lambda a: a == "public"),  # 4: exact over them
        (None, Access(Identity(user_id="x")), lambda a: a == "public"),
        ("year lt 2002", Access(Identity(groups=["g1"])), lambda a: True),
        (None, Access(Identity(groups=["g1"])), lambda a: True),  # everything: no selector
    ],
)
def test_store_top_k_with_filters_and_permissions_equals_brute_force(
    tmp_path, small_graphs, odata, access, visible
):
    store = make_store(tmp_path / "s.sqlite")
    expr = parse_filter(odata) if odata else None
    for query in unit(np.random.default_rng(5), 1):  # exact, while the graph is built
        got = dense_ids(store, query, 10, filter_expr=expr, access=access)
        assert got == brute_force(store, query, odata, visible, 10)
    store._vectors.wait()
    for query in unit(np.random.default_rng(5), 5):
        got = dense_ids(store, query, 10, filter_expr=expr, access=access)
        assert got == brute_force(store, query, odata, visible, 10)
    assert store._vectors.state["graph"]
    store.close()


def test_rewritten_and_deleted_chunks_are_seen_by_every_reader(tmp_path, small_graphs):
    path = tmp_path / "s.sqlite"
    writer = make_store(path)
    reader = LocalStore(path)
    probe = vector_of("f59", 2)
    assert dense_ids(reader, probe, 1) == ["f59-2"]
    reader._vectors.wait()
    assert dense_ids(reader, probe, 1) == ["f59-2"]
    assert reader._vectors.state["graph"]
    # the last file deleted and another written: the reader must drop f59's vectors and see
    # the new ones, whichever rids they got
    writer.delete_file("/virtual/f59")
    add_file(writer, "new", vectors_from="other")
    hits = dense_ids(reader, probe, 3)
    assert "f59-2" not in hits and hits[0] != "new-2"
    assert dense_ids(reader, vector_of("other", 2), 1) == ["new-2"]
    assert reader._vectors.state["graph"]
    writer.close()
    reader.close()


def test_the_saved_graph_is_loaded_and_caught_up(tmp_path, small_graphs, monkeypatch):
    path = tmp_path / "s.sqlite"
    store = make_store(path)
    store.refresh_vectors()
    saved = path.with_name(path.name + vectors.VECTOR_FILE_SUFFIX)
    assert saved.exists()
    # the log is trimmed up to what the file covers
    assert store._connection().execute("SELECT count(*) FROM vector_log").fetchone()[0] == 0
    add_file(store, "late")  # after the save: in the log only
    store.close()

    def no_build(*args, **kwargs):
        raise AssertionError("built from SQLite although a fitting graph was saved")

    monkeypatch.setattr(vectors.VectorIndex, "_build", no_build)
    reopened = LocalStore(path)
    assert dense_ids(reopened, vector_of("late", 1), 1) == ["late-1"]
    assert dense_ids(reopened, vector_of("f10", 3), 1) == ["f10-3"]
    reopened.close()


def test_a_foreign_damaged_or_newer_graph_is_rebuilt(tmp_path, small_graphs):
    path = tmp_path / "s.sqlite"
    store = make_store(path)
    store.close()
    backup = tmp_path / "backup.sqlite"
    shutil.copy(path, backup)  # a copy of the store before its graph was saved
    store = LocalStore(path)
    add_file(store, "extra")
    store.refresh_vectors()
    store.close()
    saved = path.with_name(path.name + vectors.VECTOR_FILE_SUFFIX)

    def check(target: Path) -> None:
        opened = LocalStore(target)
        assert dense_ids(opened, vector_of("f20", 0), 1) == ["f20-0"]
        extra = dense_ids(opened, vector_of("extra", 4), 1)
        has_extra = (
            opened._connection().execute("SELECT 1 FROM chunks WHERE id = 'extra-4'").fetchone()
        )
        assert (extra == ["extra-4"]) == bool(has_extra)
        opened.close()

    # another store's graph: its store_id differs
    other = tmp_path / "other.sqlite"
    make_store(other).close()
    shutil.copy(saved, other.with_name(other.name + vectors.VECTOR_FILE_SUFFIX))
    check(other)
    # the store restored from the backup, next to the newer graph (ahead of its log)
    shutil.copy(backup, path)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    check(path)
    # a damaged file: rebuilt, never trusted
    saved.write_bytes(saved.read_bytes()[:100])
    check(path)


def test_a_hybrid_source_loads_its_vectors_when_it_opens(tmp_path, small_graphs, monkeypatch):
    """The saved graph is read on a background thread as the source opens (at a million
    chunks the first search waited ~54 s for it), once: the first search uses it."""
    path = tmp_path / "s.sqlite"
    store = make_store(path)
    store.refresh_vectors()
    store.close()
    loads: list[str] = []
    real_load = ann.load

    def load(file: Path):
        loads.append(threading.current_thread().name)
        return real_load(file)

    monkeypatch.setattr(ann, "load", load)
    source = LocalKnowledgeSource("s", path, embeddings=HashingEmbeddings(size=DIM))
    assert source.preloading is not None
    source.preloading.join(30)
    assert loads == ["vectors-s"]
    state = source.store._vectors.state
    assert (state["live"], state["graph"]) == (FILES * CHUNKS, True)
    assert source.search_sync("f10 part 3", top=5)
    assert loads == ["vectors-s"]  # the search found them loaded
    source.close()
    for options in ({}, {"embeddings": HashingEmbeddings(size=DIM), "preload": False}):
        opened = LocalKnowledgeSource("t", path, **options)
        assert opened.preloading is None and opened.store._vectors.state["live"] == 0
        opened.close()
    assert loads == ["vectors-s"]


def test_closing_a_source_while_it_loads_its_vectors_is_quiet(tmp_path, small_graphs, monkeypatch):
    path = tmp_path / "s.sqlite"
    make_store(path).close()
    raised: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    for _ in range(5):
        source = LocalKnowledgeSource("s", path, embeddings=HashingEmbeddings(size=DIM))
        source.close()  # at once: the load finishes on the lease it holds, or finds it closed
        assert source.preloading is not None
        source.preloading.join(30)
        assert not source.preloading.is_alive()
    assert raised == []
