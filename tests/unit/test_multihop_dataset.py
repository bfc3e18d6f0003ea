"""The multi-hop question sets (benchmarks/datasets/earth-multihop and -bridge) are what they say.

Every question joins two different pages, each evidence phrase is on the page it is labelled
with (checked against ../shared/data when present), the split is the one its README states,
and the ontology (with its individuals and cue words) is one the library and the stand-in read.
The bridge set's questions reach their second page only through the entity they name in
``bridge``: it is on both pages, and the question names neither it nor any entity of the
second page that the first does not have.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from agentic_retrieval.eval.datasets import load_questions
from agentic_retrieval.eval.metrics import normalize
from agentic_retrieval.eval.standin import Gazetteer

ROOT = Path(__file__).resolve().parents[2]
DATASET = ROOT / "benchmarks" / "datasets" / "earth-multihop"
BRIDGE = ROOT / "benchmarks" / "datasets" / "earth-multihop-bridge"
SIZES = {DATASET: (3, 9), BRIDGE: (7, 10)}
BOOK = ROOT.parent / "shared" / "data" / "earth-book"
SPLITS = ("calibration", "heldout")


def questions(split: str, dataset: Path = DATASET):
    return load_questions(dataset / f"{split}.jsonl")


@pytest.mark.parametrize("dataset", [DATASET, BRIDGE], ids=lambda p: p.name)
def test_each_question_joins_two_pages_with_one_evidence_phrase_from_each(dataset: Path):
    for split in SPLITS:
        for question in questions(split, dataset):
            pages = list(question.relevant)
            assert len(pages) == 2 and pages[0] != pages[1], question.id
            assert len(question.evidence) == 2 and question.answer, question.id


@pytest.mark.parametrize("dataset", [DATASET, BRIDGE], ids=lambda p: p.name)
def test_the_split_is_fixed_by_a_hash_of_the_id_and_disjoint(dataset: Path):
    ids = {split: [q.id for q in questions(split, dataset)] for split in SPLITS}
    assert not set(ids["calibration"]) & set(ids["heldout"])
    for split, members in ids.items():
        for key in members:
            in_calibration = int(hashlib.sha256(key.encode()).hexdigest(), 16) % 3 == 0
            assert in_calibration == (split == "calibration"), key
    assert (len(ids["calibration"]), len(ids["heldout"])) == SIZES[dataset]


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
@pytest.mark.parametrize("dataset", [DATASET, BRIDGE], ids=lambda p: p.name)
def test_every_evidence_phrase_is_on_the_page_it_is_labelled_with(dataset: Path):
    for split in SPLITS:
        for question in questions(split, dataset):
            for page, phrase in zip(question.relevant, question.evidence, strict=True):
                text = normalize((BOOK / page).read_text(encoding="utf-8"))
                assert normalize(phrase) in text, (question.id, page, phrase)


def bridges(split: str) -> dict[str, str]:
    lines = (BRIDGE / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()
    return {row["id"]: row["bridge"] for row in map(json.loads, lines)}


@pytest.mark.skipif(not BOOK.is_dir(), reason="../shared/data is absent")
def test_a_bridge_question_reaches_its_second_page_only_through_its_bridging_entity():
    gazetteer = Gazetteer.from_ontology((DATASET / "ontology.jsonld").read_text())

    def names(text: str) -> set[str]:
        return {m.entity.name for m in gazetteer.mentions(text)}

    total = 0
    for split in SPLITS:
        bridge = bridges(split)
        for question in questions(split, BRIDGE):
            first, second = (
                names((BOOK / page).read_text(encoding="utf-8")) for page in question.relevant
            )
            asked = names(question.text)
            assert bridge[question.id] in first & second, question.id
            assert bridge[question.id] not in asked, question.id
            assert not asked & (second - first), (question.id, asked & (second - first))
            total += 1
    assert total >= 16
