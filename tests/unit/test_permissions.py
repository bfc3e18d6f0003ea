"""Document-level permissions in the embedded store: what each caller sees, and ingestion.

Every expected id list is what the visibility rule (agentic_retrieval.permissions) gives on
TENANT_DOCS: acme-leave (group acme), globex-leave (group globex), acme-ceo (user alice),
holidays (public).
"""

from __future__ import annotations

import json
import os
import sqlite3

import pytest
from langchain_core.documents import Document
from tests.fakes import TENANT_DOCS, ConceptEmbeddings, tenant_source, write

from agentic_retrieval.errors import PermissionsNotEnforceableError
from agentic_retrieval.permissions import Access, Identity, Permissions
from agentic_retrieval.sources.local import LocalKnowledgeSource, LocalStore
from agentic_retrieval.sources.local.store import SCHEMA_VERSION

ALICE = Identity(user_id="alice", groups=["acme"])
BOB = Identity(user_id="bob", groups=["globex"])


def keys(hits):
    return sorted(h.id.partition("#")[0] for h in hits)


@pytest.fixture
def store(tmp_path):
    source = tenant_source(tmp_path / "p.sqlite")
    yield source.store
    source.close()


@pytest.mark.parametrize(
    ("access", "expected"),
    [
        (Access(), ["holidays"]),
        (Access(ALICE), ["acme-ceo", "acme-leave", "holidays"]),
        (Access(BOB), ["globex-leave", "holidays"]),
        (Access(Identity(user_id="carol")), ["holidays"]),
        (Access(Identity(groups=["acme", "globex"])), ["acme-leave", "globex-leave", "holidays"]),
        (Access(elevated=True), ["acme-ceo", "acme-leave", "globex-leave", "holidays"]),
    ],
)
def test_each_caller_sees_exactly_what_the_permissions_allow(store, access, expected):
    assert keys(store.search("vacation days", access=access)) == expected
    assert keys(store.search("*", top=10, access=access)) == expected
    assert store.count_matching_files("vacation", access=access) == len(expected)


def test_a_user_id_and_a_group_id_of_the_same_name_do_not_match_each_other(store):
    # "alice" the group is not "alice" the user
    assert keys(store.search("vacation", access=Access(Identity(groups=["alice"])))) == ["holidays"]


def test_trimming_happens_before_top_so_a_visible_document_is_never_crowded_out(tmp_path):
    source = LocalKnowledgeSource("s", tmp_path / "top.sqlite", create=True)
    restricted = [
        {"id": f"secret-{n}", "text": "vacation vacation vacation days", "groups": ["hr"]}
        for n in range(60)
    ]
    public = [{"id": "open", "text": "a short note on vacation", "groups": ["all"]}]
    source.add_documents(restricted + public, group_ids_field="groups")
    assert keys(source.store.search("vacation", top=1)) == ["open"]
    hr = Access(Identity(groups=["hr"]))
    assert len(source.store.search("vacation", top=100, access=hr)) == 61
    source.close()


def test_the_vector_path_is_trimmed_too(tmp_path):
    source = LocalKnowledgeSource(
        "v", tmp_path / "v.sqlite", embeddings=ConceptEmbeddings(), create=True
    )
    source.add_documents(TENANT_DOCS, user_ids_field="users", group_ids_field="groups")
    vector = ConceptEmbeddings().embed_query("vacation")
    dense = source.store._dense(vector, 10, source.store._restriction(None, Access(BOB)))
    assert keys(source.store._fetch(dense)) == ["globex-leave", "holidays"]
    hybrid = source.store.search("vacation", query_vector=vector, access=Access(BOB))
    assert keys(hybrid) == ["globex-leave", "holidays"]
    source.close()


def test_an_odata_filter_narrows_within_what_the_caller_may_see_and_never_widens_it(store):
    from agentic_retrieval.odata import parse_filter

    widen = parse_filter("record_id eq 'acme-leave' or true")
    assert keys(store.search("vacation", filter_expr=widen, access=Access(BOB))) == [
        "globex-leave",
        "holidays",
    ]
    narrow = parse_filter("record_id eq 'holidays'")
    assert keys(store.search("vacation", filter_expr=narrow, access=Access(ALICE))) == ["holidays"]


def test_unmarked_documents_are_visible_unless_permissions_are_enforced(tmp_path):
    source = tenant_source(tmp_path / "mixed.sqlite")
    source.add_documents([{"id": "legacy", "text": "Old vacation rules."}])  # no permissions
    assert source.store.permissions_of("record:legacy") is None
    assert keys(source.store.search("vacation")) == ["holidays", "legacy"]
    enforced = Access(ALICE, enforce=True)
    assert keys(source.store.search("vacation", access=enforced)) == [
        "acme-ceo",
        "acme-leave",
        "holidays",
    ]
    assert keys(source.store.search("vacation", access=Access(enforce=True))) == ["holidays"]
    source.close()


def test_enforcing_on_a_store_without_any_permissions_is_an_error_not_unfiltered_results(
    tmp_path,
):
    source = LocalKnowledgeSource("plain", tmp_path / "plain.sqlite", create=True)
    source.add_documents([{"id": "a", "text": "vacation"}])
    assert keys(source.store.search("vacation")) == ["a"]
    with pytest.raises(PermissionsNotEnforceableError, match="no permission metadata"):
        source.store.search("vacation", access=Access(ALICE, enforce=True))
    source.close()


def _v1_store(path):
    """A store as version 1 wrote it (before permissions), with one indexed record."""
    from agentic_retrieval.sources.local.store import _SCHEMA, fts_segment

    conn = sqlite3.connect(path)
    conn.create_function("fts_segment", 1, fts_segment, deterministic=True)
    conn.executescript(_SCHEMA)
    conn.execute(
        "INSERT INTO files(path, slug, content_hash, fingerprint, mtime, size, chunk_count, "
        "indexed_at) VALUES ('record:old', 'record:old', 'h', 'f', 0, 1, 1, 'now')"
    )
    conn.execute(
        "INSERT INTO chunks(id, file_id, ordinal, title, content) "
        "VALUES ('old#0', 1, 0, 'Old', 'old vacation rules')"
    )
    conn.commit()
    conn.close()


def test_a_store_from_before_permissions_is_migrated_and_fails_closed_when_enforced(tmp_path):
    path = tmp_path / "v1.sqlite"
    _v1_store(path)
    store = LocalStore(path)
    assert store._schema_version() == SCHEMA_VERSION
    assert keys(store.search("vacation")) == ["old"]  # opens and answers as before
    with pytest.raises(PermissionsNotEnforceableError):
        store.search("vacation", access=Access(ALICE, enforce=True))
    store.close()
    again = LocalStore(path)  # migrating twice is a no-op
    assert keys(again.search("vacation")) == ["old"]
    again.close()


def test_reindexing_without_permissions_keeps_them_and_new_permissions_replace_them(tmp_path):
    source = tenant_source(tmp_path / "r.sqlite")
    plain = [{k: v for k, v in d.items() if k not in ("users", "groups")} for d in TENANT_DOCS]
    report = source.add_documents(plain)
    assert report.unchanged == [d["id"] for d in TENANT_DOCS]  # nothing widened
    assert keys(source.store.search("vacation")) == ["holidays"]

    report = source.add_documents(
        [TENANT_DOCS[1]], group_ids_field="groups", permissions=Permissions(group_ids=["x"])
    )  # the record's own field wins over the run's permissions
    assert (report.indexed, report.chunks_written) == ([], 0)
    report = source.add_documents(
        [plain[1]], permissions=Permissions(group_ids=["acme"])
    )  # a permission change alone: no re-chunking
    assert (report.indexed, report.chunks_written) == (["globex-leave"], 0)
    assert keys(source.store.search("vacation", access=Access(ALICE))) == [
        "acme-ceo",
        "acme-leave",
        "globex-leave",
        "holidays",
    ]
    source.close()


def test_permission_fields_are_not_metadata_and_csv_cells_split_on_semicolons(tmp_path):
    records = write(
        tmp_path / "people.csv",
        "id,text,readers,teams\n"
        "r1,vacation plan one,alice;bob,\n"
        'r2,vacation plan two,,"hr, payroll"\n'
        "r3,vacation plan three,,all\n",
    )
    from agentic_retrieval.sources.local.records import RecordFields

    source = LocalKnowledgeSource("csv", tmp_path / "csv.sqlite", create=True)
    fields = RecordFields.of(user_ids_field="readers", group_ids_field="teams")
    report = source.index_records(records, fields=fields)
    assert report.failed == []
    assert source.store.permissions_of("record:r1") == Permissions(user_ids=["alice", "bob"])
    assert source.store.permissions_of("record:r2") == Permissions(group_ids=["hr", "payroll"])
    assert source.store.permissions_of("record:r3") == Permissions(public=True)
    hits = source.store.search("vacation", access=Access(Identity(user_id="bob")))
    assert keys(hits) == ["r1", "r3"]
    assert all("readers" not in h.metadata and "teams" not in h.metadata for h in hits)
    source.close()


def test_langchain_documents_carry_permissions_in_their_metadata(tmp_path):
    source = LocalKnowledgeSource("docs", tmp_path / "docs.sqlite", create=True)
    documents = [
        Document("Payroll runs on the 25th.", id="pay", metadata={"acl": ["payroll"]}),
        Document("The canteen opens at 8.", id="food", metadata={"acl": "all"}),
    ]
    source.add_documents(documents, group_ids_field="acl")
    assert keys(source.store.search("*", top=5)) == ["food"]
    payroll = Access(Identity(user_id="u1", groups=["payroll"]))
    assert keys(source.store.search("*", top=5, access=payroll)) == ["food", "pay"]
    source.close()


def test_files_take_the_runs_permissions_or_their_sidecar_which_is_never_indexed(tmp_path):
    docs = tmp_path / "docs"
    write(docs / "leave.md", "# Leave\n\nStaff get 25 vacation days.")
    write(docs / "board.md", "# Board\n\nBoard vacation rules.")
    write(docs / "board.md.permissions.json", json.dumps({"userIds": ["alice"]}))
    source = LocalKnowledgeSource("files", tmp_path / "files.sqlite", create=True)
    report = source.index([docs], permissions=Permissions(group_ids=["staff"]))
    assert sorted(p.rsplit("/", 1)[1] for p in report.indexed) == ["board.md", "leave.md"]
    assert not [p for p in source.store.indexed_paths() if p.endswith(".json")]
    staff = Access(Identity(user_id="bob", groups=["staff"]))
    assert [h.title for h in source.store.search("vacation", access=staff)] == ["Leave"]
    assert [h.title for h in source.store.search("vacation", access=Access(ALICE))] == ["Board"]

    write(docs / "board.md.permissions.json", json.dumps({"groupIds": ["all"]}))
    report = source.index([docs])  # only the sidecar changed: no file is re-read
    assert (len(report.indexed), report.chunks_written) == (1, 0)
    assert [h.title for h in source.store.search("vacation")] == ["Board"]
    source.close()


def test_a_malformed_sidecar_fails_its_file_instead_of_indexing_it_with_a_guess(tmp_path):
    docs = tmp_path / "docs"
    write(docs / "a.md", "vacation")
    write(docs / "a.md.permissions.json", json.dumps({"groupIDs": ["typo"]}))
    source = LocalKnowledgeSource("files", tmp_path / "bad.sqlite", create=True)
    report = source.index([docs])
    assert [f.reason for f in report.failed] == [
        'a.md.permissions.json: expected {"userIds": [...], "groupIds": [...]}, '
        "got {'groupIDs': ['typo']}"
    ]
    assert source.store.count_chunks() == 0
    source.close()


def test_azure_conventions_all_and_none_and_limits():
    assert Permissions.from_lists(["none"], ["all"]) == Permissions(public=True)
    assert Permissions.from_lists(["none"], []) == Permissions()
    assert Permissions.from_lists(["b", "a", "a"]).user_ids == ("a", "b")
    with pytest.raises(ValueError, match="at most 1000"):
        Permissions.from_lists([f"u{n}" for n in range(1001)])
    with pytest.raises(ValueError, match="non-empty string"):
        Permissions.from_lists(["ok", ""])
    with pytest.raises(ValueError, match="must be a list of ids"):
        Permissions.from_lists("alice")


def test_an_identity_never_shows_its_token():
    identity = Identity(user_id="alice", groups=["acme"], token="eyJ.secret.sig")
    assert "eyJ" not in repr(identity)
    assert "eyJ" not in json.dumps(identity.model_dump(mode="json"))
    assert identity.token is not None and identity.token.get_secret_value() == "eyJ.secret.sig"


# --- other sources that trim by permission ---------------------------------------------------


def _search(source, identity=None, enforce=False):
    import asyncio

    from agentic_retrieval.sources.base import SearchQuery

    query = SearchQuery(text="vacation", identity=identity, enforce_permissions=enforce)
    return sorted(h.doc_key for h in asyncio.run(source.search(query)))


def _lc_documents():
    return [
        Document("acme vacation", id="a", metadata={"groups": ["acme"]}),
        Document("globex vacation", id="b", metadata={"groups": ["globex"]}),
        Document("public vacation", id="c", metadata={"groups": ["all"]}),
        Document("legacy vacation", id="d", metadata={}),
    ]


def test_a_langchain_store_trims_with_a_predicate_its_filter_translation_applies():
    from langchain_core.vectorstores import InMemoryVectorStore

    from agentic_retrieval.sources.langchain import LangChainKnowledgeSource
    from agentic_retrieval.testing import HashingEmbeddings

    store = InMemoryVectorStore(HashingEmbeddings())
    store.add_documents(_lc_documents())
    source = LangChainKnowledgeSource("lc", store, group_ids_field="groups")
    assert source.trims_by_permission
    acme = Identity(groups=["acme"])
    assert _search(source) == ["c", "d"]
    assert _search(source, acme) == ["a", "c", "d"]
    assert _search(source, acme, enforce=True) == ["a", "c"]
    plain = LangChainKnowledgeSource("plain", store)
    assert not plain.trims_by_permission
    with pytest.raises(PermissionsNotEnforceableError, match="no permission fields"):
        _search(plain, acme, enforce=True)


def test_a_langchain_store_that_cannot_express_the_predicate_fails_closed(tmp_path):
    pytest.importorskip("langchain_chroma")
    from langchain_chroma import Chroma

    from agentic_retrieval.sources.langchain import LangChainKnowledgeSource
    from agentic_retrieval.testing import HashingEmbeddings

    store = Chroma("acl", HashingEmbeddings(), persist_directory=str(tmp_path / "chroma"))
    store.add_documents([Document("public vacation", id="c", metadata={"groups": "all"})])
    source = LangChainKnowledgeSource("chroma", store, group_ids_field="groups")
    with pytest.raises(PermissionsNotEnforceableError, match="cannot apply permissions"):
        _search(source, Identity(groups=["acme"]))


def test_the_in_memory_source_skips_what_the_identity_may_not_see():
    from agentic_retrieval import InMemoryKnowledgeSource

    docs = [
        {"key": "a", "content": "acme vacation", "permissions": {"groupIds": ["acme"]}},
        {"key": "c", "content": "public vacation", "permissions": {"groupIds": ["all"]}},
        {"key": "d", "content": "legacy vacation"},
    ]
    source = InMemoryKnowledgeSource("memory", docs)
    assert _search(source) == ["c", "d"]
    assert _search(source, Identity(groups=["acme"]), enforce=True) == ["a", "c"]
    legacy = InMemoryKnowledgeSource("legacy", docs[2:])
    with pytest.raises(PermissionsNotEnforceableError):
        _search(legacy, enforce=True)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and symlinks")
def test_a_sidecar_that_is_a_link_or_a_fifo_fails_its_file_closed(tmp_path):
    """The sidecar gets the indexed files' check: a FIFO is not 'no sidecar' (which would
    index the file with the run's permissions, public here), and a link is not followed."""
    docs, outside = tmp_path / "docs", tmp_path / "outside"
    write(docs / "fifo.md", "vacation rules for the board")
    os.mkfifo(docs / "fifo.md.permissions.json")
    write(outside / "grant.json", json.dumps({"groupIds": ["all"]}))
    write(docs / "linked.md", "vacation rules for the directors")
    (docs / "linked.md.permissions.json").symlink_to(outside / "grant.json")
    write(docs / "plain.md", "vacation rules for staff")
    source = LocalKnowledgeSource("files", tmp_path / "files.sqlite", create=True)
    report = source.index([docs], permissions=Permissions(public=True))
    assert [p.rsplit("/", 1)[1] for p in report.indexed] == ["plain.md"]
    reasons = sorted(f.reason for f in report.failed)
    assert reasons == [
        "fifo.md.permissions.json: not a regular file (a FIFO); fifo.md is not indexed",
        "linked.md.permissions.json: a link (a sidecar found in a folder must be a regular "
        "file); linked.md is not indexed",
    ]
    assert [h.title for h in source.store.search("vacation")] == ["plain"]
    source.close()
