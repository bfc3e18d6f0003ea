"""Azure AI Search sources honour the caller's identity: the token passed through as Azure's
``x-ms-query-source-authorization`` header, or a permission filter on id fields.

Driven through the real SDK against the local REST stand-in, which trims by the token as
Azure does; the request headers and filters the source sends are asserted exactly.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import jwt
import pytest

pytest.importorskip("azure.search.documents", reason="needs the [azure] extra")

from azure.core.credentials import AzureKeyCredential
from tests.integration.azure_standin import AzureSearchStandIn

from agentic_retrieval.errors import FilterNotSupportedError, PermissionsNotEnforceableError
from agentic_retrieval.permissions import Identity
from agentic_retrieval.sources.azure import AzureSearchKnowledgeSource
from agentic_retrieval.sources.base import SearchQuery

pytestmark = pytest.mark.integration

KEY = "standin-admin-key"
DOCUMENTS = [
    {"id": "acme", "content": "Acme vacation policy", "users": [], "groups": ["acme"]},
    {"id": "globex", "content": "Globex vacation policy", "users": [], "groups": ["globex"]},
    {"id": "memo", "content": "Board vacation memo", "users": ["alice"], "groups": []},
    {"id": "public", "content": "Public vacation days", "users": ["all"], "groups": []},
]


def token(subject: str, groups: list[str]) -> str:
    claims = {"oid": subject, "groups": groups, "aud": "https://search.azure.com"}
    return jwt.encode(claims, "stand-in-does-not-verify-this-secret!!", algorithm="HS256")


@pytest.fixture
def standin() -> Iterator[AzureSearchStandIn]:
    server = AzureSearchStandIn(KEY)
    fields: list[dict[str, Any]] = [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "content", "type": "Edm.String", "searchable": True},
        {"name": "users", "type": "Collection(Edm.String)", "permissionFilter": "userIds"},
        {"name": "groups", "type": "Collection(Edm.String)", "permissionFilter": "groupIds"},
    ]
    definition = {"name": "policies", "fields": fields, "permissionFilterOption": "enabled"}
    server.add_index(definition, DOCUMENTS)
    # the security-filter pattern: the same id fields, which Azure itself does not enforce
    plain = [{k: v for k, v in f.items() if k != "permissionFilter"} for f in fields]
    server.add_index({"name": "filtered", "fields": plain}, DOCUMENTS)
    with server:
        yield server


def source(
    standin: AzureSearchStandIn, index: str = "policies", **options: Any
) -> AzureSearchKnowledgeSource:
    return AzureSearchKnowledgeSource(
        "policies",
        endpoint=standin.endpoint,
        index_name=index,
        credential=AzureKeyCredential(KEY),
        title_field=None,
        retry_total=0,
        validate=False,
        **options,
    )


async def keys(src: AzureSearchKnowledgeSource, **query: Any) -> list[str]:
    hits = await src.search(SearchQuery(text="vacation", **query))
    return sorted(h.doc_key for h in hits)


async def test_the_callers_token_is_passed_as_azures_header_and_azure_trims_by_it(standin):
    src = source(standin, pass_identity_token=True)
    assert src.trims_by_permission
    alice = Identity(user_id="alice", groups=["acme"], token=token("alice", ["acme"]))
    assert await keys(src, identity=alice) == ["acme", "memo", "public"]
    sent = standin.search_requests()[-1]
    assert sent.query_source_authorization == f"Bearer {token('alice', ['acme'])}"
    assert "filter" not in sent.body  # the trimming is Azure's, from the token

    assert await keys(src) == ["public"]  # anonymous: no header at all
    assert standin.search_requests()[-1].query_source_authorization is None


async def test_a_permission_filter_on_id_fields_is_built_from_the_identity(standin):
    src = source(standin, "filtered", user_ids_field="users", group_ids_field="groups")
    bob = Identity(user_id="bob", groups=["globex", "o'brien"])
    assert await keys(src, identity=bob, filter="id ne 'x'") == ["globex", "public"]
    sent = standin.search_requests()[-1]
    assert sent.query_source_authorization is None
    assert sent.body["filter"] == (
        "(users/any(p: p eq 'all' or p eq 'bob') or groups/any(p: p eq 'all' or p eq 'globex' "
        "or p eq 'o''brien') or (not users/any() and not groups/any())) and (id ne 'x')"
    )
    await keys(src, identity=bob, enforce_permissions=True)
    assert standin.search_requests()[-1].body["filter"] == (
        "users/any(p: p eq 'all' or p eq 'bob') or groups/any(p: p eq 'all' or p eq 'globex' "
        "or p eq 'o''brien')"
    )


async def test_a_quote_in_an_id_cannot_end_its_string_and_widen_the_filter(standin):
    src = source(standin, "filtered", user_ids_field="users", group_ids_field="groups")
    sly = Identity(user_id="x') or true or ('", groups=[])
    assert await keys(src, identity=sly, enforce_permissions=True) == ["public"]


async def test_a_query_filter_that_does_not_stand_on_its_own_is_refused_before_sending(
    standin,
):
    src = source(standin, "filtered", user_ids_field="users", group_ids_field="groups")
    with pytest.raises(FilterNotSupportedError):
        await keys(src, filter="id eq 'x') or (true")
    assert standin.search_requests() == []


async def test_enforced_permissions_without_fields_or_a_token_fail_before_any_request(
    standin,
):
    src = source(standin, pass_identity_token=True)
    with pytest.raises(PermissionsNotEnforceableError, match="no token"):
        await keys(src, identity=Identity(user_id="alice"), enforce_permissions=True)
    plain = source(standin)
    assert not plain.trims_by_permission
    with pytest.raises(PermissionsNotEnforceableError):
        await keys(plain, enforce_permissions=True)
    assert standin.search_requests() == []


async def test_the_token_never_reaches_the_logs(standin, caplog):
    caplog.set_level(logging.DEBUG)
    src = source(standin, pass_identity_token=True)
    secret = token("alice", ["acme"])
    await keys(src, identity=Identity(user_id="alice", token=secret))
    assert secret.split(".")[2] not in caplog.text
