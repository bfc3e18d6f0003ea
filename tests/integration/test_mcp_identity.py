"""The MCP endpoint retrieves as the identity in ``x-ms-query-source-authorization``; the tool
itself has no argument through which a model could choose an identity."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from tests.fakes import AUDIENCE, ISSUER, JWT_SECRET, TokenMint, tenant_source
from tests.server_harness import running_server

from agentic_retrieval import KnowledgeBase
from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.server.tokens import HEADER, TokenSettings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
KEY, SCOPED = "mcp-query-key", "mcp-scoped-key"
MINT = TokenMint()


@pytest.fixture(scope="module")
def base_url(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mcp-identity")
    policies = tenant_source(folder / "policies.sqlite")
    settings = ServerSettings(
        query_keys=[KEY],
        scoped_query_keys=[f"other:{SCOPED}"],
        read_env_keys=False,
        tokens=TokenSettings(issuer=ISSUER, audience=AUDIENCE, secret=JWT_SECRET),
    )
    bases = [KnowledgeBase([policies], name="policies")]
    with running_server(create_app(bases, settings=settings)) as url:
        yield url
    policies.close()


def connect(url: str, headers: dict[str, str]) -> Client:
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60))
    return Client(streamable_http_client(url, http_client=http))


async def retrieve_as(base_url: str, token: str | None) -> list[str]:
    headers = {"api-key": KEY} | ({HEADER: f"Bearer {token}"} if token else {})
    async with connect(f"{base_url}/knowledgebases/policies/mcp", headers) as client:
        result = await client.call_tool(
            "knowledge_base_retrieve", {"query": "vacation days", "effort": "minimal"}
        )
    assert not result.is_error, result.content
    return sorted(r["docKey"].partition("#")[0] for r in result.structured_content["references"])


async def test_the_tool_retrieves_as_the_tokens_identity(base_url):
    assert await retrieve_as(base_url, MINT.hs256("alice", ["acme"])) == [
        "acme-ceo",
        "acme-leave",
        "holidays",
    ]
    assert await retrieve_as(base_url, MINT.hs256("bob", ["globex"])) == [
        "globex-leave",
        "holidays",
    ]
    assert await retrieve_as(base_url, None) == ["holidays"]


async def test_no_tool_argument_can_carry_an_identity(base_url):
    async with connect(f"{base_url}/knowledgebases/policies/mcp", {"api-key": KEY}) as client:
        tools = await client.list_tools()
    properties = set(tools.tools[0].input_schema["properties"])
    assert properties == {
        "query",
        "messages",
        "effort",
        "output_mode",
        "filter",
        "max_output_documents",
        "exclude_sources",
    }


async def test_a_bad_token_or_a_key_scoped_elsewhere_never_reaches_the_tool(base_url):
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    url = f"{base_url}/knowledgebases/policies/mcp"
    expired = MINT.hs256("alice", ["acme"], exp=1_000_000, iat=999_000, nbf=999_000)
    async with httpx2.AsyncClient() as http:
        bad = await http.post(url, json=request, headers={"api-key": KEY, HEADER: expired})
        scoped = await http.post(url, json=request, headers={"api-key": SCOPED})
    assert bad.status_code == 401 and bad.json()["error"]["message"] == (
        "Access denied: the token has expired."
    )
    assert scoped.status_code == 403 and SCOPED not in scoped.text
