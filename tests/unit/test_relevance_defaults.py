"""Relevance by default (issue 18): no default cut-off on scores that only order candidates,
every explicit threshold honoured, meaning from the vectors in the default ranking."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence

import pytest
from langchain_core.embeddings import Embeddings
from typer.testing import CliRunner

from agentic_retrieval import Context, InMemoryKnowledgeSource, KnowledgeBase
from agentic_retrieval.cli import app
from agentic_retrieval.context import THRESHOLD_ENV_VAR, applied_threshold, parse_threshold
from agentic_retrieval.errors import InvalidDefinitionError, ThresholdSettingError
from agentic_retrieval.kb.catalog import defaults_for
from agentic_retrieval.kb.definitions import KnowledgeBaseSettings, parse_knowledge_base
from agentic_retrieval.kb.loader import open_knowledge_base
from agentic_retrieval.rerankers import (
    HybridReranker,
    LexicalReranker,
    LLMGraderReranker,
    PassthroughReranker,
    calibration_of,
)
from agentic_retrieval.rerankers.hybrid import RELEVANCE_KNOT
from agentic_retrieval.rerankers.lexical import calibrate
from agentic_retrieval.sources.base import Hit, SearchQuery
from agentic_retrieval.sources.local import LocalKnowledgeSource
from agentic_retrieval.testing import ScriptedChatModel

runner = CliRunner()
QUESTION = "what happens if I see a doctor outside the network"
BENEFITS = [
    {
        "id": "out-of-network",
        "title": "Non-participating providers",
        "content": "Northwind Standard does not pay for care from providers that are not part "
        "of the Northwind Health network: members pay the full cost themselves.",
    },
    {
        "id": "dental",
        "title": "Dental cleanings",
        "content": "Two dental cleanings a year are covered. See a dentist in the network for "
        "the lowest price.",
    },
    {
        "id": "vision",
        "title": "Vision exams",
        "content": "One eye exam a year is covered; glasses are covered every two years.",
    },
    {
        "id": "pharmacy",
        "title": "Prescriptions",
        "content": "Generic drugs cost 10 dollars at any pharmacy in the network; happens to "
        "be cheaper by mail.",
    },
]
"""A paraphrase fixture: the question shares one word ("network") with the passage that
answers it, and more with passages that do not."""


def ask(kb: KnowledgeBase, question: str = QUESTION, **request: object):
    return kb.retrieve({"intents": [{"search": question}], **request})


def keys(response) -> list[str]:
    return [ref.doc_key for ref in response.references]


def rerank_record(response) -> dict:
    return next(r.model_extra for r in response.activity if r.type == "semanticReranker")


@pytest.fixture
def benefits() -> InMemoryKnowledgeSource:
    return InMemoryKnowledgeSource("benefits", BENEFITS, description="Health plan benefits")


# --- the default: lexical scores order, they do not cut --------------------------------------


def test_defaults_return_the_passage_that_answers_a_paraphrase(benefits, monkeypatch):
    monkeypatch.delenv(THRESHOLD_ENV_VAR, raising=False)
    response = ask(KnowledgeBase([benefits]))
    assert "out-of-network" in keys(response)
    scores = {ref.doc_key: ref.reranker_score for ref in response.references}
    assert scores["out-of-network"] < 2.5  # what Azure's default would have dropped
    record = rerank_record(response)
    assert (record["candidateCount"], record["calibratedCount"]) == (3, 0)
    assert 0 < record["termCoverage"] < 1
    assert not any(r.model_extra.get("warning") for r in response.activity)


def test_an_explicit_threshold_still_cuts_lexical_scores(benefits):
    strict = KnowledgeBase([benefits], defaults=Context(reranker_threshold=2.5))
    response = ask(strict)
    assert keys(response) == []
    search = next(r for r in response.activity if r.type == "searchIndex")
    assert search.model_extra["warning"] == (
        "3 documents found by this query were left out of the response: 3 scored under the "
        "rerankerThreshold (2.5)."
    )


def test_the_default_still_cuts_calibrated_scores_so_unanswerable_stays_empty(benefits):
    class Grader:  # a calibrated reranker judging every passage irrelevant
        name = "grader"
        calibrated = True

        async def ascore(self, query: str, hits: Sequence[Hit]) -> list[float]:
            return [1.0] * len(hits)

    response = ask(KnowledgeBase([benefits], reranker=Grader()))
    assert keys(response) == [] and response.text == "[]"
    assert rerank_record(response)["calibratedCount"] == 3


def test_a_grader_that_fell_back_to_lexical_scores_is_not_cut_by_the_default(benefits):
    """The grader's fallback batch counts as the fallback's scores do: lexical scores only
    order, so the default threshold (meant for the model's grades) does not empty them."""
    unusable = ScriptedChatModel(script={})  # every call fails: nothing planned
    grader = LLMGraderReranker(unusable, fallback=LexicalReranker())
    response = ask(KnowledgeBase([benefits], reranker=grader))
    assert sorted(keys(response)) == sorted(keys(ask(KnowledgeBase([benefits]))))
    assert keys(response) and rerank_record(response)["calibratedCount"] == 0
    assert unusable.script.count() == 2  # one batch, asked twice, then the fallback


async def test_the_grader_reports_which_scores_are_its_own():
    hits = [Hit(doc_key=str(i), content="the network doctor") for i in range(3)]
    model = ScriptedChatModel(
        script={"ListwiseGrades": [{"grades": [{"id": "p1", "grade": 3}]}]}
    )  # the first batch is graded, the second one's two asks find nothing planned
    grader = LLMGraderReranker(model, batch_size=2, max_concurrency=1, fallback=LexicalReranker())
    report = await grader.ascore_reported("network doctor", hits)
    assert report.calibrated == [True, True, False]
    assert report.scores[:2] == [3.0, 0.0]


def test_passthrough_cuts_azure_scores_and_keeps_fallback_scores_in_one_request():
    hits = [
        Hit(doc_key="azure-weak", content="network doctor", reranker_score=1.2),
        Hit(doc_key="azure-strong", content="network doctor outside", reranker_score=3.1),
        Hit(doc_key="local", content="the network"),
    ]

    class Mixed:
        name, description, kind = "mixed", "", "searchIndex"

        async def search(self, query: SearchQuery) -> list[Hit]:
            return hits

    response = ask(KnowledgeBase([Mixed()]))
    assert sorted(keys(response)) == ["azure-strong", "local"]
    assert rerank_record(response)["calibratedCount"] == 2
    reranker = PassthroughReranker()
    assert calibration_of(reranker, hits) == [True, True, False]


def test_which_rerankers_declare_calibrated_scores():
    hit = Hit(doc_key="a", content="x")
    assert calibration_of(LexicalReranker(), [hit]) == [False]
    assert calibration_of(HybridReranker(), [hit]) == [False]
    assert LLMGraderReranker.calibrated is True

    class Undeclared:  # takes the protocol at its word: Azure's scale, meaning included
        name = "custom"

        async def ascore(self, query: str, hits: Sequence[Hit]) -> list[float]:
            return [0.0] * len(hits)

    assert calibration_of(Undeclared(), [hit]) == [True]


@pytest.mark.parametrize(
    ("source", "setting", "calibrated", "expected"),
    [
        (None, "default", True, 2.5),
        (None, "default", False, None),
        (None, 1.0, False, 1.0),
        (None, None, True, None),
        (3.0, None, False, 3.0),
        (0.0, "default", True, 0.0),
    ],
)
def test_applied_threshold_honours_every_explicit_value(source, setting, calibrated, expected):
    assert applied_threshold(source, setting, calibrated) == expected


@pytest.mark.parametrize(
    ("text", "expected"), [("2.5", 2.5), ("0", 0.0), ("none", None), ("default", "default")]
)
def test_thresholds_parse_as_people_write_them(text, expected):
    assert parse_threshold(text) == expected


@pytest.mark.parametrize("text", ["4.5", "-1", "high", "nan"])
def test_a_bad_threshold_is_refused_naming_where_it_came_from(text):
    with pytest.raises(ValueError, match=r"^--threshold must be a number from 0 to 4, 'none'"):
        parse_threshold(text, "--threshold")


# --- every level of an explicit threshold ------------------------------------------------------


def test_a_request_threshold_per_source_is_honoured(benefits):
    params = [{"knowledgeSourceName": "benefits", "rerankerThreshold": 2.0}]
    response = ask(KnowledgeBase([benefits]), knowledgeSourceParams=params)
    assert keys(response) == ["dental", "pharmacy"]


def test_the_environment_sets_the_service_default(benefits, monkeypatch):
    monkeypatch.setenv(THRESHOLD_ENV_VAR, "2.0")
    assert Context().reranker_threshold == 2.0
    assert keys(ask(KnowledgeBase([benefits]))) == ["dental", "pharmacy"]
    monkeypatch.setenv(THRESHOLD_ENV_VAR, "none")
    assert Context().reranker_threshold is None
    monkeypatch.setenv(THRESHOLD_ENV_VAR, "lots")
    with pytest.raises(ThresholdSettingError, match=THRESHOLD_ENV_VAR):
        Context()


def test_knowledge_base_settings_win_over_the_environment(benefits, monkeypatch):
    monkeypatch.setenv(THRESHOLD_ENV_VAR, "none")
    settings = KnowledgeBaseSettings.model_validate(
        {"retrieveDefaults": {"rerankerThreshold": 2.0}}
    )
    kb = KnowledgeBase([benefits], defaults=settings.context())
    assert keys(ask(kb)) == ["dental", "pharmacy"]
    # and the request wins over the knowledge base
    params = [{"knowledgeSourceName": "benefits", "rerankerThreshold": 0}]
    assert len(keys(ask(kb, knowledgeSourceParams=params))) == 3


def test_a_service_knowledge_base_definition_sets_the_threshold(benefits, monkeypatch):
    monkeypatch.delenv(THRESHOLD_ENV_VAR, raising=False)
    body = {
        "name": "plans",
        "knowledgeSources": [{"name": "benefits"}],
        "retrieveDefaults": {"rerankerThreshold": 2.0},
    }
    definition = parse_knowledge_base(body)
    assert definition.to_wire()["retrieveDefaults"] == {"rerankerThreshold": 2.0}
    kb = KnowledgeBase([benefits], defaults=defaults_for(definition))
    assert keys(ask(kb)) == ["dental", "pharmacy"]
    with pytest.raises(InvalidDefinitionError, match="rerankerThreshold"):
        parse_knowledge_base({**body, "retrieveDefaults": {"rerankerThreshold": 5}})


def test_a_context_threshold_is_honoured_in_a_dict_context_too(benefits):
    kb = KnowledgeBase([benefits])
    state = {"intents": [QUESTION]}
    assert len(kb.graph.invoke(state, context={"reranker_threshold": 2.0})["references"]) == 2
    assert len(kb.graph.invoke(state, context={"reranker_threshold": None})["references"]) == 3


# --- meaning from the vectors ------------------------------------------------------------------


class ParaphraseEmbeddings(Embeddings):
    """Deterministic fake: one dimension per concept, paraphrases share a dimension."""

    CONCEPTS = (
        frozenset({"doctor", "providers", "provider", "care", "physician"}),
        frozenset({"outside", "not", "non", "participating"}),
        frozenset({"dental", "dentist", "teeth"}),
        frozenset({"drugs", "pharmacy", "prescriptions"}),
    )

    def _vector(self, text: str) -> list[float]:
        words = set(re.findall(r"\w+", text.lower()))
        vector = [float(len(words & concept)) for concept in self.CONCEPTS] + [0.2]
        norm = math.sqrt(sum(v * v for v in vector))
        return [v / norm for v in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


def local_benefits(path, embeddings=None) -> LocalKnowledgeSource:
    source = LocalKnowledgeSource("benefits", path, embeddings=embeddings, create=True)
    source.add_documents(BENEFITS)
    return source


def test_hybrid_hits_carry_the_cosine_the_store_computed(tmp_path):
    model = ParaphraseEmbeddings()
    source = local_benefits(tmp_path / "hybrid.sqlite", model)
    hits = source.search_sync(QUESTION)
    query = model.embed_query(QUESTION)
    assert hits and all(h.vector_similarity is not None for h in hits)
    for hit in hits:
        text = f"{hit.title}\n{hit.content}"
        expected = sum(a * b for a, b in zip(query, model.embed_query(text), strict=True))
        assert hit.vector_similarity == pytest.approx(expected, abs=1e-5)
    lexical = local_benefits(tmp_path / "lexical.sqlite").search_sync(QUESTION)
    assert lexical and all(h.vector_similarity is None for h in lexical)


def test_the_default_reranker_ranks_by_meaning_when_the_source_holds_vectors(tmp_path):
    lexical = KnowledgeBase([local_benefits(tmp_path / "lexical.sqlite")])
    hybrid = KnowledgeBase([local_benefits(tmp_path / "hybrid.sqlite", ParaphraseEmbeddings())])
    assert not keys(ask(lexical))[0].startswith("out-of-network")
    answer = ask(hybrid)
    assert keys(answer)[0].startswith("out-of-network")
    assert rerank_record(answer)["reranker"] == "passthrough+lexical+vector"


def test_the_hybrid_blend_is_lexical_where_a_hit_has_no_similarity():
    hits = [Hit(doc_key="a", content="doctor network"), Hit(doc_key="b", content="dentist")]
    lexical = LexicalReranker().score("doctor network", hits)
    assert HybridReranker().score("doctor network", hits) == lexical
    with_vectors = [h.model_copy(update={"vector_similarity": 0.7}) for h in hits]
    blended = HybridReranker(0.5).score("doctor network", with_vectors)
    assert blended == pytest.approx([calibrate((s + 4.0) / 2, RELEVANCE_KNOT) for s in lexical])


# --- the command line --------------------------------------------------------------------------


@pytest.fixture
def kb_dir(tmp_path, monkeypatch):
    monkeypatch.delenv(THRESHOLD_ENV_VAR, raising=False)
    folder = tmp_path / "docs"
    folder.mkdir()
    for doc in BENEFITS:
        (folder / f"{doc['id']}.md").write_text(f"# {doc['title']}\n\n{doc['content']}\n")
    # lexical: these tests are about the options over ranked, unjudged scores
    result = runner.invoke(
        app,
        [
            "index",
            "--kb",
            str(tmp_path / "kb"),
            "--source",
            "benefits",
            "--no-embeddings",
            str(folder),
        ],
    )
    assert result.exit_code == 0, result.output
    return tmp_path / "kb"


def cli_keys(kb_dir, *options: str) -> list[str]:
    result = runner.invoke(
        app, ["retrieve", "--kb", str(kb_dir), "--effort", "minimal", "--json", *options, QUESTION]
    )
    assert result.exit_code == 0, result.output
    return [ref["docKey"] for ref in json.loads(result.stdout)["references"]]


def test_cli_threshold_and_top_options(kb_dir):
    everything = cli_keys(kb_dir)
    assert "docs-out-of-network-md-0" in everything and len(everything) == 3
    assert cli_keys(kb_dir, "--threshold", "4") == []
    assert cli_keys(kb_dir, "--threshold", "none") == everything
    assert cli_keys(kb_dir, "--top", "1") == everything[:1]


def test_cli_refuses_a_bad_threshold_naming_the_option(kb_dir, monkeypatch):
    result = runner.invoke(app, ["retrieve", "--kb", str(kb_dir), "--threshold", "high", "x"])
    assert result.exit_code == 2
    assert "--threshold must be a number from 0 to 4, 'none' or 'default', not 'high'" in (
        result.stderr
    )
    monkeypatch.setenv(THRESHOLD_ENV_VAR, "high")
    result = runner.invoke(app, ["retrieve", "--kb", str(kb_dir), QUESTION])
    assert result.exit_code == 2 and THRESHOLD_ENV_VAR in result.stderr


def test_cli_env_and_knowledge_base_settings_and_their_order(kb_dir, monkeypatch):
    monkeypatch.setenv(THRESHOLD_ENV_VAR, "4")
    assert cli_keys(kb_dir) == []
    update = runner.invoke(
        app, ["kb", "update", "--kb", str(kb_dir), "--reranker-threshold", "none"]
    )
    assert update.exit_code == 0, update.output
    settings = json.loads((kb_dir / "knowledge-base.json").read_text())["settings"]
    assert settings["retrieveDefaults"] == {"rerankerThreshold": 0.0}
    assert len(cli_keys(kb_dir)) == 3  # the knowledge base wins over the environment
    assert cli_keys(kb_dir, "--threshold", "4") == []  # the command line wins over both
    assert open_knowledge_base(kb_dir).defaults.reranker_threshold == 0.0
    cleared = runner.invoke(
        app, ["kb", "update", "--kb", str(kb_dir), "--reranker-threshold", "default"]
    )
    assert cleared.exit_code == 0, cleared.output
    assert "settings" not in json.loads((kb_dir / "knowledge-base.json").read_text())
    assert cli_keys(kb_dir) == []  # the environment again


def test_cli_readable_output_says_what_was_left_out_and_that_nothing_was_judged(kb_dir):
    strict = runner.invoke(
        app,
        ["retrieve", "--kb", str(kb_dir), "--effort", "minimal", "--threshold", "2.5", QUESTION],
    )
    assert strict.exit_code == 0, strict.output
    out = " ".join(strict.stdout.split())
    assert "Nothing found: no passage is returned for this question." in out
    assert "yet the threshold 2.5 applies to them all the same: 0 of 3 kept" in out
    assert (
        "Left out (benefits, search #0): 3 documents found by this query were left out of the "
        "response: 3 scored under the rerankerThreshold (2.5)." in out
    )
    default = runner.invoke(app, ["retrieve", "--kb", str(kb_dir), "--effort", "minimal", QUESTION])
    out = " ".join(default.stdout.split())
    assert "Relevance: 3 of 3 candidates have no calibrated relevance score" in out
    assert "so the default threshold does not cut them; the top passages hold" in out
    assert "of the question's words" in out
