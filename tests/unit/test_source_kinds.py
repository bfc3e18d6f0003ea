"""The hosted source kinds: one registry, and definitions that allow each kind its parameters."""

from __future__ import annotations

import pytest

from agentic_retrieval.errors import InvalidDefinitionError, UnsupportedKindError
from agentic_retrieval.kb.definitions import SUPPORTED_SOURCE_KINDS, parse_knowledge_source
from agentic_retrieval.kb.source_kinds import SOURCE_KINDS

INDEX = {"searchIndexName": "docs"}


def test_every_validated_kind_is_hosted_and_only_file_sources_own_a_store():
    assert set(SOURCE_KINDS) == set(SUPPORTED_SOURCE_KINDS) == {"searchIndex", "file"}
    assert {name for name, kind in SOURCE_KINDS.items() if kind.owns_store} == {"file"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"kind": "searchIndex"},
            "searchIndexParameters: a searchIndex knowledge source needs searchIndexParameters "
            "with searchIndexName",
        ),
        (
            {"kind": "file", "searchIndexParameters": INDEX},
            "searchIndexParameters: not allowed on a file knowledge source",
        ),
        (
            {"kind": "searchIndex", "searchIndexParameters": INDEX, "fileParameters": {}},
            "fileParameters: not allowed on a searchIndex knowledge source",
        ),
    ],
)
def test_a_kind_takes_its_own_parameters_only(body, message):
    with pytest.raises(InvalidDefinitionError) as raised:
        parse_knowledge_source({"name": "s", **body})
    assert str(raised.value) == message


def test_each_kind_parses_with_its_parameters_and_others_are_named_unsupported():
    assert parse_knowledge_source({"name": "s", "kind": "file"}).kind == "file"
    index = parse_knowledge_source(
        {"name": "s", "kind": "searchIndex", "searchIndexParameters": INDEX}
    )
    assert index.index_name == "docs"
    with pytest.raises(UnsupportedKindError, match="'web' is a kind this service cannot host"):
        parse_knowledge_source({"name": "s", "kind": "web"})
