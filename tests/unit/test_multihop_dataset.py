"""The multi-hop question set (benchmarks/datasets/earth-multihop) is what it says it is.

Every question joins two different pages, each evidence phrase is on the page it is labelled
with (checked against ../shared/data when present), the split is the one its README states,
and the ontology (with its individuals and cue words) is one the library and the stand-in read.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from agentic_retrieval.eval.datasets import load_questions
from agentic_retrieval.eval.metrics import normalize
from agentic_retrieval.eval.standin import Gazetteer

ROOT = Path(__file__).resolve().parents[2]
DATASET = ROOT / "benchmarks" / "datasets" / "earth-multihop"
BOOK = ROOT.parent / "shared" / "data" / "earth-book"
SPLITS = ("calibration", "heldout")


def questions(split: str):
    return load_questions(DATASET / f"{split}.jsonl")


def test_each_question_joins_two_pages_with_one_evidence_phrase_from_each():
    for split in SPLITS:
        for question in questions(split):
            pages = list(question.relevant)
            assert len(pages) == 2 and pages[0] != pages[1], question.id
            assert len(question.evidence) == 2 and question.answer, question.id


def test_the_split_is_fixed_by_a_hash_of_the_id_and_disjoint():
    ids = {split: [q.id for q in questions(split)] for split in SPLITS}
    assert not set(ids["calibration"]) & set(ids["heldout"])
    for split, members in ids.items():
        for key in members:
            in_calibration = int(hashlib.sha256(key.encode()).hexdigest(), 16) % 3 == 0
            assert in_calibration == (split == "calibration"), key
    assert (len(ids["calibration"]), len(ids["heldout"])) == (3, 9)


def test_the_ontology_names_the_books_entities_and_cue_words():
    gazetteer = Gazetteer.from_ontology((DATASET / "ontology.jsonld").read_text())
    assert set(gazetteer.ontology.classes) == {
        "Place",
        "Phenomenon",
        "Organism",
        "Substance",
        "Satellite",
    }
    assert set(gazetteer.cues) == {"observedBy", "hasFeature", "involves", "locatedIn"}
    names = {m.entity.name for m in gazetteer.mentions("Suomi NPP saw coccolithophores")}
    assert names == {"Suomi NPP", "coccolithophores"}


@pytest.mark.skipif(not BOOK.is_dir(), reason="../shared/data is absent")
def test_every_evidence_phrase_is_on_the_page_it_is_labelled_with():
    for split in SPLITS:
        for question in questions(split):
            for page, phrase in zip(question.relevant, question.evidence, strict=True):
                text = normalize((BOOK / page).read_text(encoding="utf-8"))
                assert normalize(phrase) in text, (question.id, page, phrase)
