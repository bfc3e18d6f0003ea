"""Top-k with filters and permissions equals brute force, whatever engine ranks (issue 21).

A scaled-down version of the 1M-chunk property: the store's filtered, permission-trimmed
top ``k`` is the best ``k`` of every match of the unfiltered query that passes the filter and
that the caller may see. A post-filter over the engine's unfiltered top ``k`` (or ``k`` plus
a margin) fails this on the rare filters below, which keep 1-3% of the chunks.
"""

from __future__ import annotations

import json
import math
import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from agentic_retrieval.odata import Expr, parse_filter, to_sql
from agentic_retrieval.permissions import ELEVATED, Access, Identity, Permissions
from agentic_retrieval.sources.local.store import (
    ChunkRecord,
    FileState,
    LocalStore,
    StoredHit,
    ann,
    lexical_directory,
    metadata_column,
    restriction,
)
from agentic_retrieval.sources.local.store import local_store as local_store_module
from agentic_retrieval.sources.local.store.fusion import reciprocal_rank_fusion
from agentic_retrieval.sources.local.store.lexical_index import LEXICAL_FORMAT

WORDS = (
    "solar wind turbine grid battery storage heat pump winter demand price coal nuclear tidal "
    "geothermal insulation steam reactor panel farm hill river dam water night second supply "
    "market policy carbon emission city road rail port ship cargo copper steel forest soil"
).split()
CATEGORIES = ["energy", "transport", "industry", "nature", "policy"]
TOP = 10
FILTERS = [
    "category eq 'energy'",
    "category eq 'nature' and year lt 1995",  # rare: about 2% of the chunks
    "year ge 2015",
    "tags/any(t: t eq 'rare')",  # about 3% of the chunks
    "search.in(category, 'policy,industry')",
    "not (category eq 'energy') and tags/any()",
    "published ge 2020-06-01T00:00:00Z and published lt 2021-01-01T00:00:00Z",
    "scores/any(s: s ge 90 and s lt 95)",
    "region/code eq 'X1'",
    "tags/all(t: t ne 'common')",  # no exact tantivy equivalent: the SQL path answers
    "category gt 'p'",  # a string range: likewise
]
QUERIES = ["solar battery storage", "winter heat demand", "steel cargo port ship", "carbon"]
DIMENSION = 16
DEPTH = 50
"""How deep each of a hybrid search's rankings goes before fusion (``max(top, 50)``)."""
ACCESSES = [
    ELEVATED,
    Access(),
    Access(identity=Identity(user_id="ann", groups=("ops",)), enforce=True),
    Access(identity=Identity(user_id="ben")),
]
PERMISSIONS = [
    Permissions(public=True),
    Permissions(group_ids=("ops",)),
    Permissions(user_ids=("ben",)),
    Permissions(user_ids=("zed",)),
    None,
]


def build(path: Path) -> LocalStore:
    """The generated store: 240 files of 1-3 chunks, fields on both levels, 5 kinds of access.

    Each chunk has a random vector (its own generator: the text and fields stay as they were).
    """
    rng = random.Random(1021)
    vector_rng = np.random.default_rng(2021)
    store = LocalStore(path, create=True)
    with store.transaction():
        for n in range(240):
            category = rng.choice(CATEGORIES)
            shared = {
                "category": category,
                "year": rng.randint(1980, 2024),
                "published": f"{rng.randint(2018, 2023)}-{rng.randint(1, 12):02d}-15T08:00:00Z",
                "region": {"code": rng.choice(["X1", "X2", "Y7"])},
            }
            chunks = []
            for i in range(rng.randint(1, 3)):
                words = rng.choices(WORDS, k=rng.randint(6, 30))
                tags = rng.sample(["common", "blue", "green", "red"], rng.randint(0, 2))
                if rng.random() < 0.03:
                    tags.append("rare")
                own = {"tags": tags, "scores": [rng.randint(0, 100) for _ in range(2)]}
                chunks.append(ChunkRecord(f"d{n}-{i}", i, f"doc {n}", " ".join(words), None, own))
            state = FileState(f"/virtual/d{n}", f"d{n}", str(n), str(n), 0.0, 1, len(chunks))
            permissions = rng.choice(PERMISSIONS)
            vectors = vector_rng.standard_normal((len(chunks), DIMENSION)).tolist()
            store.replace_file(state, {}, chunks, vectors, permissions, fields=shared)
    return store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalStore, Path]]:
    path = tmp_path_factory.mktemp("filtered_top_k") / "store.sqlite"
    store = build(path)
    yield store, path
    store.close()


def matching(path: Path, expr: Expr) -> set[str]:
    """Chunk ids the filter selects, by the SQL semantics (see test_tantivy_filters)."""
    where, params = to_sql(expr, lambda p: metadata_column(p, "both"))
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            f"SELECT c.id FROM chunks c JOIN files f ON f.id = c.file_id WHERE {where}", params
        )
        return {str(r[0]) for r in rows}
    finally:
        conn.close()


def visible(store: LocalStore, path: Path, access: Access) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT c.id, f.path FROM chunks c JOIN files f ON f.id = c.file_id")
        return {str(c) for c, p in rows if access.may_see(store.permissions_of(p))}
    finally:
        conn.close()


def tied(a: float, b: float) -> bool:
    # an engine may sum a score's parts in another order with a filter (float rounding)
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-9)


def same_ranking(got: list[StoredHit], expected: list[StoredHit]) -> bool:
    """Equal scores in order and the same chunks, except among ties at the cut."""
    if len(got) != len(expected):
        return False
    if not all(tied(g.score, e.score) for g, e in zip(got, expected, strict=True)):
        return False
    if not expected:
        return True
    cut = expected[-1].score
    above = {h.id for h in got if not tied(h.score, cut)}
    return above == {h.id for h in expected if not tied(h.score, cut)}


@pytest.mark.parametrize("text", QUERIES)
@pytest.mark.parametrize("access", ACCESSES, ids=["elevated", "anonymous", "enforced", "user"])
def test_filtered_top_k_is_the_best_k_of_all_matches(store, text: str, access: Access) -> None:
    store_, path = store
    everything = store_.search(text, top=100_000, access=ELEVATED)
    assert len(everything) > 100  # the query matches far more than top
    allowed = visible(store_, path, access)
    for filter_text in FILTERS:
        expr = parse_filter(filter_text)
        selected = matching(path, expr) & allowed
        expected = [h for h in everything if h.id in selected][:TOP]
        got = store_.search(text, top=TOP, filter_expr=expr, access=access)
        # never fewer than top while more match, and the same best k
        assert len(got) == len(expected), filter_text
        assert same_ranking(got, expected), (filter_text, [h.id for h in got])


def test_rare_filters_are_rare(store) -> None:
    store_, path = store
    total = store_.count_chunks()
    for filter_text in FILTERS[1], FILTERS[3]:
        share = len(matching(path, parse_filter(filter_text))) / total
        assert 0 < share < 0.05, filter_text


def test_a_post_filter_would_fail_this_suite(store) -> None:
    """The property has teeth: filtering the unfiltered top 5k afterwards returns too few."""
    store_, path = store
    short = 0
    for text in QUERIES:
        everything = store_.search(text, top=100_000, access=ELEVATED)
        for filter_text in FILTERS:
            selected = matching(path, parse_filter(filter_text))
            expected = [h for h in everything if h.id in selected][:TOP]
            post = [h for h in everything[: 5 * TOP] if h.id in selected][:TOP]
            short += len(post) < len(expected)
    assert short >= 10  # 20 of the 44 pairs come back short


def assert_brute_force(store: LocalStore, path: Path, text: str, access: Access) -> None:
    everything = store.search(text, top=100_000, access=ELEVATED)
    allowed = visible(store, path, access)
    for filter_text in FILTERS:
        expr = parse_filter(filter_text)
        expected = [h for h in everything if h.id in matching(path, expr) & allowed][:TOP]
        got = store.search(text, top=TOP, filter_expr=expr, access=access)
        assert len(got) == len(expected), filter_text
        assert same_ranking(got, expected), (filter_text, [h.id for h in got])


def test_an_index_of_the_previous_format_is_rebuilt_with_the_filter_fields(tmp_path) -> None:
    """An index written before the filter fields existed (format 1) is rebuilt on open."""
    path = tmp_path / "store.sqlite"
    build(path).close()
    current_file = lexical_directory(path) / "current"
    current = json.loads(current_file.read_text())
    current_file.write_text(json.dumps({**current, "format": 1}))
    store = LocalStore(path)
    try:
        rebuilt = json.loads(current_file.read_text())
        assert rebuilt["format"] == LEXICAL_FORMAT == 3
        assert rebuilt["name"] != current["name"]
        assert_brute_force(store, path, "winter heat demand", ACCESSES[2])
    finally:
        store.close()


def test_writes_after_indexing_reach_the_filter_fields(tmp_path) -> None:
    """New permissions and new fields reach tantivy through the outbox, as the text does."""
    path = tmp_path / "store.sqlite"
    store = build(path)
    try:
        ben = ACCESSES[3]
        hidden = [p for p in store.indexed_paths() if not ben.may_see(store.permissions_of(p))]
        for doc_path in hidden[:20]:
            store.set_permissions(doc_path, Permissions(user_ids=("ben",)))
        state = FileState("/virtual/new", "new", "n", "n", 0.0, 1, 1)
        chunk = ChunkRecord("new-0", 0, "doc new", "carbon carbon carbon steel", None, {})
        store.replace_file(state, {}, [chunk], fields={"category": "rare-kind", "year": 1970})
        assert_brute_force(store, path, "carbon", ben)
        found = store.search("carbon", top=TOP, filter_expr=parse_filter("year lt 1971"))
        assert [h.id for h in found] == ["new-0"]
    finally:
        store.close()


# --- dense and hybrid ----------------------------------------------------------------------------


def query_vector(n: int) -> list[float]:
    return [float(x) for x in np.random.default_rng(7000 + n).standard_normal(DIMENSION)]


def nearest_ids(path: Path, vector: list[float]) -> list[str]:
    """Every chunk by cosine with ``vector``, nearest first (exact, read from SQLite)."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT id, vector FROM chunks WHERE vector IS NOT NULL").fetchall()
    finally:
        conn.close()
    matrix = np.stack([np.frombuffer(blob, dtype=np.float32) for _, blob in rows])
    matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    query = np.asarray(vector, dtype=np.float32)
    cosines = matrix @ (query / np.linalg.norm(query))
    return [str(rows[i][0]) for i in np.argsort(-cosines, kind="stable")]


@pytest.fixture(params=["probe-or-subset", "deepening", "long-allow-lists"])
def subset_bound(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each way a restricted dense search can go.

    - the defaults: a filter leaving the first probe short has its chunks collected from
      tantivy (this store is far below the exact-subset bound);
    - an exact-subset bound of 5: such a filter is searched deeper instead;
    - allow-lists of at most 5 rids: the SQL residual's allow-list is checked against
      candidates instead of restricting tantivy by row ids (lexical and dense alike).
    """
    if request.param == "deepening":
        monkeypatch.setattr(ann, "EXACT_MAX_ALLOWED", 5)
    elif request.param == "long-allow-lists":
        monkeypatch.setattr(restriction, "RID_SET_MAX", 5)
        monkeypatch.setattr(local_store_module, "RID_SET_MAX", 5)
    return str(request.param)


@pytest.mark.parametrize("access", ACCESSES, ids=["elevated", "anonymous", "enforced", "user"])
def test_filtered_dense_top_k_is_the_nearest_k_that_pass(store, access, subset_bound) -> None:
    """A dense search alone (text without a word): the nearest ``top`` passing chunks."""
    store_, path = store
    allowed = visible(store_, path, access)
    for n in range(3):
        vector = query_vector(n)
        ranking = nearest_ids(path, vector)
        for filter_text in FILTERS:
            selected = matching(path, parse_filter(filter_text)) & allowed
            expected = [i for i in ranking if i in selected][:TOP]
            got = store_.search(
                "^",
                top=TOP,
                filter_expr=parse_filter(filter_text),
                query_vector=vector,
                access=access,
            )
            assert [h.id for h in got] == expected, (filter_text, n)


@pytest.mark.parametrize("text", QUERIES[:3])
@pytest.mark.parametrize("access", ACCESSES, ids=["elevated", "anonymous", "enforced", "user"])
def test_filtered_hybrid_top_k_fuses_the_two_filtered_rankings(
    store, text: str, access: Access, subset_bound: str
) -> None:
    """Hybrid: reciprocal rank fusion of the best 50 passing chunks of each ranking."""
    store_, path = store
    everything = [h.id for h in store_.search(text, top=100_000, access=ELEVATED)]
    allowed = visible(store_, path, access)
    vector = query_vector(QUERIES.index(text))
    ranking = nearest_ids(path, vector)
    for filter_text in FILTERS:
        selected = matching(path, parse_filter(filter_text)) & allowed
        lexical = [(i, 0.0) for i in everything if i in selected][:DEPTH]
        dense = [(i, 0.0) for i in ranking if i in selected][:DEPTH]
        expected = [i for i, _ in reciprocal_rank_fusion([lexical, dense])[:TOP]]
        got = store_.search(
            text,
            top=TOP,
            filter_expr=parse_filter(filter_text),
            query_vector=vector,
            access=access,
        )
        assert [h.id for h in got] == expected, filter_text


def test_a_dense_post_filter_would_fail_this_suite(store) -> None:
    """The dense property has teeth too: the unfiltered nearest 50, filtered, fall short."""
    _, path = store
    short = pairs = 0
    for n in range(3):
        ranking = nearest_ids(path, query_vector(n))
        for filter_text in FILTERS:
            selected = matching(path, parse_filter(filter_text))
            expected = [i for i in ranking if i in selected][:TOP]
            post = [i for i in ranking[:DEPTH] if i in selected][:TOP]
            short += len(post) < len(expected)
            pairs += 1
    assert short >= 6, (short, pairs)


def test_compiled_filters_restrict_dense_search_without_reading_every_chunk(
    store, monkeypatch
) -> None:
    """The SQL allow-list (every chunk's JSON read) is left for what tantivy cannot answer."""
    store_, _ = store
    scans: list[str] = []

    def recording(conn: sqlite3.Connection, where: str, params: list) -> list[int] | None:
        scans.append(where)
        return allowed_rids(conn, where, params)

    allowed_rids = restriction.allowed_rids
    monkeypatch.setattr(restriction, "allowed_rids", recording)
    monkeypatch.setattr(local_store_module, "allowed_rids", recording)
    for filter_text in FILTERS[:9]:  # every one of these compiles
        for access in ACCESSES:
            store_.search(
                "carbon",
                top=TOP,
                filter_expr=parse_filter(filter_text),
                query_vector=query_vector(0),
                access=access,
            )
    assert scans == []
    store_.search(
        "carbon", top=TOP, filter_expr=parse_filter(FILTERS[9]), query_vector=query_vector(0)
    )
    assert len(scans) == 1  # the residual's allow-list, read once for both rankings


@pytest.fixture(scope="module")
def graph_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalStore, Path]]:
    """The same store with its vectors in an HNSW graph (built for 100 vectors or more)."""
    pytest.importorskip("faiss", reason="the HNSW graph needs faiss-cpu (local extra)")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ann, "ANN_MIN_VECTORS", 100)
        path = tmp_path_factory.mktemp("filtered_top_k_graph") / "store.sqlite"
        store = build(path)
        store.refresh_vectors()
        yield store, path
        store.close()


@pytest.mark.parametrize("access", ACCESSES, ids=["elevated", "anonymous", "enforced", "user"])
def test_filtered_dense_top_k_through_the_graph(graph_store, access: Access) -> None:
    """Through the graph too: its search breadth (efSearch 512) passes the store's size here,
    so every search is exhaustive and must find exactly the nearest passing chunks."""
    store_, path = graph_store
    assert store_._vectors.state["graph"]
    allowed = visible(store_, path, access)
    for n in range(3):
        vector = query_vector(n)
        ranking = nearest_ids(path, vector)
        for filter_text in FILTERS:
            selected = matching(path, parse_filter(filter_text)) & allowed
            got = store_.search(
                "^",
                top=TOP,
                filter_expr=parse_filter(filter_text),
                query_vector=vector,
                access=access,
            )
            assert [h.id for h in got] == [i for i in ranking if i in selected][:TOP]
