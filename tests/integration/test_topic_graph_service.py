"""Topic graphs through a real ``serve --data`` (api-version ``2026-11-01-preview``).

An index with a ``topicGraphProfiles`` entry reads back as it was written; an older version
or a malformed profile is a 400 naming the field. Its documents carry vectors around 6 known
themes; a lexical query favours theme 0. Ranked plainly (``topicGraph: none``), the top 8
references come from theme 0 alone; with the profile's default (``balanced``) or a request's
``diverse``, they span several themes, the best match still first, and the search's activity
record says which setting ran.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from tests.integration.service_process import KEY, serve_process

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

NEW = {"api-version": "2026-11-01-preview"}
OLD = {"api-version": "2026-04-01"}
DIM = 8
THEMES = 6
PER_THEME = 12
PROFILE = {"name": "themes", "indexName": "notes-topics", "defaultKind": "balanced"}


def index_body(profiles: list[dict]) -> dict:
    return {
        "name": "notes",
        "fields": [
            {"name": "id", "type": "Edm.String", "key": True},
            {"name": "content", "type": "Edm.String"},
            {"name": "theme", "type": "Edm.String"},
            {"name": "vec", "type": "Collection(Edm.Single)", "dimensions": DIM},
        ],
        "vectorSearch": {"topicGraphProfiles": profiles},
    }


def centres() -> np.ndarray:
    return np.random.default_rng(4).normal(size=(THEMES, DIM))


def documents() -> list[dict]:
    rng = np.random.default_rng(5)
    docs = []
    for theme in range(THEMES):
        for n in range(PER_THEME):
            # theme 0 says "report" more often: a plain lexical ranking puts it first
            words = "report " * (3 if theme == 0 else 1) + f"entry {n} of theme {theme}"
            vector = centres()[theme] + 0.1 * rng.normal(size=DIM)
            docs.append(
                {
                    "@search.action": "upload",
                    "id": f"t{theme}-{n}",
                    "content": words,
                    "theme": f"t{theme}",
                    "vec": [float(v) for v in vector],
                }
            )
    return docs


def retrieve(http: httpx.Client, topic_graph: dict | None) -> tuple[list[str], dict]:
    params: dict = {
        "knowledgeSourceName": "notes",
        "kind": "searchIndex",
        "resultsProcessing": "none",  # the source's own order
        "maxOutputDocuments": 8,
    }
    if topic_graph is not None:
        params["topicGraph"] = topic_graph
    body = {
        "intents": [{"type": "semantic", "search": "report"}],
        "retrievalReasoningEffort": {"kind": "minimal"},
        "includeActivity": True,
        "knowledgeSourceParams": [params],
    }
    response = http.post("/knowledgebases/kb/retrieve", json=body, params=NEW)
    assert response.status_code == 200, response.text
    found = response.json()
    [search] = [a for a in found["activity"] if a["type"] == "searchIndex"]
    return [r["docKey"] for r in found["references"]], search["searchIndexArguments"]


def themes(keys: list[str]) -> set[str]:
    return {key.split("-")[0] for key in keys}


def test_topic_graph_profiles_and_sampled_retrieval_over_rest(tmp_path):
    with serve_process(tmp_path / "data", extra=("--no-embeddings",)) as (url, _):
        http = httpx.Client(base_url=url, headers={"api-key": KEY}, timeout=120)
        old = http.put("/indexes/notes", json=index_body([PROFILE]), params=OLD)
        assert old.status_code == 400, old.text
        assert "vectorSearch.topicGraphProfiles" in old.json()["error"]["message"]
        assert "2026-11-01-preview" in old.json()["error"]["message"]
        wrong = http.put(
            "/indexes/notes",
            json=index_body([PROFILE | {"defaultDiversityFactor": 0.4}]),
            params=NEW,
        )
        assert wrong.status_code == 400
        assert (
            "defaultDiversityFactor can only be used when defaultKind is diverse"
            in (wrong.json()["error"]["message"])
        )
        created = http.put("/indexes/notes", json=index_body([PROFILE]), params=NEW)
        assert created.status_code == 201, created.text
        read = http.get("/indexes/notes", params=NEW).json()
        assert read["vectorSearch"]["topicGraphProfiles"] == [PROFILE]
        posted = http.post("/indexes/notes/docs/index", json={"value": documents()}, params=NEW)
        assert posted.status_code == 200, posted.text
        source = {"kind": "searchIndex", "searchIndexParameters": {"searchIndexName": "notes"}}
        assert http.put("/knowledgesources/notes", json=source, params=NEW).status_code == 201
        kb = {"knowledgeSources": [{"name": "notes"}]}
        assert http.put("/knowledgebases/kb", json=kb, params=NEW).status_code == 201

        plain, plain_args = retrieve(http, {"kind": "none"})
        assert themes(plain) == {"t0"}
        assert plain_args["topicGraph"] == {"kind": "none"}
        balanced, balanced_args = retrieve(http, None)  # the profile's default
        assert balanced_args["topicGraph"] == {"kind": "balanced", "minDiversityPoolSize": 1000}
        assert len(themes(balanced)) >= 4
        assert balanced[0] == plain[0]
        diverse, diverse_args = retrieve(http, {"kind": "diverse", "diversityFactor": 0.8})
        assert diverse_args["topicGraph"] == {
            "kind": "diverse",
            "diversityFactor": 0.8,
            "minDiversityPoolSize": 1000,
        }
        assert len(themes(diverse)) >= 3

        body = {
            "intents": [{"type": "semantic", "search": "report"}],
            "knowledgeSourceParams": [
                {"knowledgeSourceName": "notes", "topicGraph": {"kind": "balanced"}}
            ],
        }
        refused = http.post("/knowledgebases/kb/retrieve", json=body, params=OLD)
        assert refused.status_code == 400
        assert "knowledgeSourceParams[0].topicGraph" in refused.json()["error"]["message"]

        # a vector query of docs/search: vectorQueries[].topicGraph over the profile
        assert themes(vector_search(http, {"kind": "none"})) == {"t0"}
        assert len(themes(vector_search(http, None))) >= 4
        bad = vector_search(http, {"kind": "balanced", "diversityFactor": 0.5}, status=400)
        assert "vectorQueries[0].topicGraph" in bad[0]
        older = vector_search(http, {"kind": "none"}, status=400, version=OLD)
        assert "need api-version 2026-11-01-preview" in older[0]


def vector_search(
    http: httpx.Client, topic_graph: dict | None, status: int = 200, version: dict = NEW
) -> list[str]:
    query: dict = {"kind": "vector", "vector": [float(v) for v in centres()[0]], "k": 8}
    if topic_graph is not None:
        query["topicGraph"] = topic_graph
    body = {"vectorQueries": [query], "top": 8, "select": "id"}
    response = http.post("/indexes/notes/docs/search", json=body, params=version)
    assert response.status_code == status, response.text
    if status != 200:
        return [response.json()["error"]["message"]]
    return [doc["id"] for doc in response.json()["value"]]
