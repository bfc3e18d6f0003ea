"""``serve --data`` holds a bounded number of indexes, knowledge sources and knowledge bases.

Each index and each file knowledge source is a store file that every searching thread opens:
nothing bounded how many a loop of creates could make, so one admin client could exhaust the
disk and the file handles of the whole service. Creating past the limit now answers what
Azure answers past its tier's index quota: 429, a message naming the limit. Replacing an
existing definition is not a create; deleting one makes room again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient
from tests.server_harness import running_server
from typer.testing import CliRunner

from agentic_retrieval.cli import app as cli
from agentic_retrieval.kb.management import DEFAULT_MAX_DEFINITIONS
from agentic_retrieval.kb.service import STORES_DIR, ServiceDirectory
from agentic_retrieval.kb.service_state import ServiceState
from agentic_retrieval.server import ServerSettings, create_app

pytestmark = pytest.mark.integration
VERSION = {"api-version": "2026-04-01"}
ADMIN = {"api-key": "admin-key"}


def index(name: str) -> dict:
    return {
        "name": name,
        "fields": [
            {"name": "id", "type": "Edm.String", "key": True},
            {"name": "content", "type": "Edm.String"},
        ],
    }


def index_source(name: str, index_name: str = "i0") -> dict:
    params = {"searchIndexName": index_name}
    return {"name": name, "kind": "searchIndex", "searchIndexParameters": params}


@pytest.fixture
def service(tmp_path, open_service_state) -> ServiceState:
    return open_service_state(tmp_path / "data")


@pytest.fixture
def http(service) -> Iterator[TestClient]:
    settings = ServerSettings(
        api_keys=["admin-key"],
        read_env_keys=False,
        max_indexes=2,
        max_knowledge_sources=2,
        max_knowledge_bases=1,
    )
    app = create_app(service=service, settings=settings)
    with TestClient(app, base_url="http://127.0.0.1:8080") as client:
        client.params = VERSION
        client.headers.update(ADMIN)
        yield client


def assert_quota(response: httpx.Response, what: str, plural: str, limit: int) -> None:
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert error["code"] == "QuotaExceeded"
    assert f"The {what} quota has been exceeded for this service" in error["message"]
    assert error["message"].endswith(f"Maximum number of {plural} allowed: {limit}")
    assert "Retry-After" not in response.headers  # waiting does not make room


def stores(service: ServiceState) -> list[str]:
    """The stores the service keeps: store files in DIR, or stores in its database."""
    if isinstance(service, ServiceDirectory):
        return sorted(p.name for p in (service.path / STORES_DIR).glob("*.sqlite"))
    with service.database.connection() as conn:
        return [str(row[0]) for row in conn.execute("SELECT name FROM ar_stores ORDER BY name")]


def test_creating_past_each_limit_answers_429_and_creates_nothing(http, service):
    assert http.post("/indexes", json=index("i0")).status_code == 201
    assert http.put("/indexes/i1", json=index("i1")).status_code == 201
    assert_quota(http.post("/indexes", json=index("i2")), "index", "indexes", 2)
    assert_quota(http.put("/indexes('i2')", json=index("i2")), "index", "indexes", 2)
    assert len(stores(service)) == 2  # the refused creates left no store behind
    assert [i["name"] for i in http.get("/indexes").json()["value"]] == ["i0", "i1"]

    assert http.put("/knowledgesources/ks0", json=index_source("ks0")).status_code == 201
    assert http.put("/knowledgesources/files", json={"kind": "file"}).status_code == 201
    refused = http.put("/knowledgesources/files2", json={"kind": "file"})
    assert_quota(refused, "knowledge source", "knowledge sources", 2)
    assert len(stores(service)) == 3  # two indexes and one file source

    base = {"name": "kb0", "knowledgeSources": [{"name": "ks0"}]}
    assert http.post("/knowledgebases", json=base).status_code == 201
    second = http.post("/knowledgebases", json={**base, "name": "kb1"})
    assert_quota(second, "knowledge base", "knowledge bases", 1)
    assert http.get("/knowledgebases/kb1").status_code == 404


def test_replacing_is_not_creating_and_a_delete_makes_room(http):
    for name in ("i0", "i1"):
        assert http.put(f"/indexes/{name}", json=index(name)).status_code == 201
    extended = index("i1")
    extended["fields"].append({"name": "year", "type": "Edm.Int32", "filterable": True})
    assert http.put("/indexes/i1", json=extended).status_code == 204  # at the limit: a replace
    assert http.post("/indexes", json=index("i2")).status_code == 429
    assert http.delete("/indexes/i0").status_code == 204
    assert http.post("/indexes", json=index("i2")).status_code == 201


def test_racing_creates_never_pass_the_limit(http):
    statuses: list[int] = []

    def create(n: int) -> None:
        statuses.append(http.put(f"/indexes/r{n}", json=index(f"r{n}")).status_code)

    threads = [threading.Thread(target=create, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(statuses) == [201, 201, *[429] * 6]
    assert len(http.get("/indexes").json()["value"]) == 2


def test_the_azure_sdk_sees_the_quota_as_azure_answers_it(service):
    pytest.importorskip("azure.search.documents.indexes")
    from azure.core.credentials import AzureKeyCredential
    from azure.core.exceptions import HttpResponseError
    from azure.search.documents.indexes import SearchIndexClient
    from azure.search.documents.indexes.models import SearchIndex, SimpleField

    settings = ServerSettings(api_keys=["admin-key"], read_env_keys=False, max_indexes=1)
    app = create_app(service=service, settings=settings)
    fields = [SimpleField(name="id", type="Edm.String", key=True)]
    with running_server(app) as url:
        # create_or_update (PUT) would be retried on a 429 by azure-core, as against Azure
        client = SearchIndexClient(url, AzureKeyCredential("admin-key"), retry_total=0)
        client.create_index(SearchIndex(name="first", fields=fields))
        with pytest.raises(HttpResponseError) as refused:
            client.create_index(SearchIndex(name="second", fields=fields))
    assert refused.value.status_code == 429
    assert "Maximum number of indexes allowed: 1" in str(refused.value)


def test_the_limits_default_to_azures_s1_and_come_from_flags_or_the_environment(
    tmp_path, monkeypatch
):
    assert DEFAULT_MAX_DEFINITIONS == 50
    started = []
    monkeypatch.setattr(
        "agentic_retrieval.server.serving.serve", lambda app, **kw: started.append(app)
    )
    runner = CliRunner()
    argv = ["serve", "--data", str(tmp_path / "data"), "--port", "0", "--api-key", "k"]
    assert runner.invoke(cli, argv).exit_code == 0
    limits = started[-1].state.settings.definition_limits()
    assert (limits.indexes, limits.knowledge_sources, limits.knowledge_bases) == (50, 50, 50)
    monkeypatch.setenv("AGENTIC_RETRIEVAL_MAX_INDEXES", "7")
    monkeypatch.setenv("AGENTIC_RETRIEVAL_MAX_KNOWLEDGE_BASES", "0")
    result = runner.invoke(cli, [*argv, "--max-knowledge-sources", "3"])
    assert result.exit_code == 0, result.output
    limits = started[-1].state.settings.definition_limits()
    assert (limits.indexes, limits.knowledge_sources, limits.knowledge_bases) == (7, 3, 0)
    refused = runner.invoke(cli, [*argv, "--max-indexes", "-1"])
    assert refused.exit_code == 2
    with pytest.raises(ValueError, match="at least 0"):
        ServerSettings(max_knowledge_bases=-1)
