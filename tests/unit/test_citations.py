"""Citation validation: invented ref_ids never survive, and nothing else is rewritten."""

from __future__ import annotations

import pytest

from agentic_retrieval.text.citations import cited_ids, validate_citations

VALID = {0, 1}


@pytest.mark.parametrize(
    ("answer", "repaired", "removed"),
    [
        ("Leave [ref_id:0][ref_id:4].", "Leave [ref_id:0].", [4]),
        ("x [ref_id:1; 9] y", "x [ref_id:1] y", [9]),
        ("x [ref_id:1-9] y", "x [ref_id:1] y", [9]),
        ("x [ref_id:1 and 9] y", "x [ref_id:1] y", [9]),
        ("x [ref_id:1|9] y", "x [ref_id:1] y", [9]),
        ("x [ref_id:1 , 9 ,] y", "x [ref_id:1] y", [9]),
        ("x [REF_ID: 05].", "x.", [5]),
        ("a [ref_id:9.0].", "a.", [9]),
        ("[[ref_id:9]] start", "start", [9]),
        ("[[ref_id:1]] start", "[ref_id:1] start", []),
        ("grouped [ref_id: 0, 1]. end", "grouped [ref_id:0][ref_id:1]. end", []),
        ("only bad [ref_id:7] here", "only bad here", [7]),
    ],
)
def test_invented_ids_are_removed_in_every_shape(answer, repaired, removed):
    assert validate_citations(answer, VALID) == (repaired, removed)


def test_text_without_removed_markers_is_untouched():
    code = "    for (i = 0 ; i < n ; i++) x = a ? b : c;  ratio 3 : 1 [ref_id:0]"
    assert validate_citations(code, VALID) == (code, [])


def test_cited_ids_in_order_without_repeats():
    assert cited_ids("a [ref_id:2] b [ref_id: 0, 2] c [[ref_id:1]]") == [2, 0, 1]
