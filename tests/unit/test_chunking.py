"""Chunk boundaries: paragraphs and sentences kept whole, overlap of whole sentences."""

from __future__ import annotations

import time

import pytest

from agentic_retrieval.sources.local.chunking import (
    SplitText,
    chunk_text,
    chunks_of,
    normalize_text,
    split_ahead,
    split_sentences,
)


def sentence(i: int) -> str:
    """A 49-character sentence: 'S07 word word ... word.'."""
    return f"S{i:02d}" + " word" * 9 + "."


def paragraph(first: int, count: int = 10) -> str:
    return " ".join(sentence(i) for i in range(first, first + count))


def test_sentence_helper_is_49_chars() -> None:
    assert len(sentence(3)) == 49
    assert len(paragraph(0)) == 499


def test_short_text_is_one_normalized_chunk() -> None:
    text = "  Title line  \n\n  First   line of a\nparagraph.  \n\n\n Second one. "
    assert chunk_text(text) == ["Title line\n\nFirst line of a paragraph.\n\nSecond one."]


def test_empty_text_has_no_chunks() -> None:
    assert chunk_text("") == []
    assert chunk_text(" \n\n \t ") == []


def test_paragraphs_stay_whole_and_overlap_is_whole_sentences() -> None:
    p1, p2, p3 = paragraph(0), paragraph(10), paragraph(20)
    chunks = chunk_text(f"{p1}\n\n{p2}\n\n{p3}", size=1200, overlap=200)
    # 4 sentences (4*49 + 3 = 199 chars) fit in the 200-char overlap, 5 would not.
    carried = " ".join(sentence(i) for i in range(16, 20))
    assert chunks == [f"{p1}\n\n{p2}", f"{carried}\n\n{p3}"]


def test_long_paragraph_splits_between_sentences() -> None:
    chunks = chunk_text(paragraph(0, 30), size=500, overlap=100)
    expected_runs = [(0, 10), (8, 18), (16, 26), (24, 30)]
    assert chunks == [" ".join(sentence(i) for i in range(a, b)) for a, b in expected_runs]
    assert all(len(chunk) <= 500 for chunk in chunks)


def test_no_overlap_when_disabled() -> None:
    chunks = chunk_text(paragraph(0, 30), size=500, overlap=0)
    assert chunks == [paragraph(0), paragraph(10), paragraph(20)]


def test_whole_paragraph_wins_over_overlap() -> None:
    p1 = paragraph(0, 14)  # 699 chars: more than half a chunk
    p2 = paragraph(20, 21)  # 1049 chars: fits a chunk alone, not with 199 chars of overlap
    assert chunk_text(f"{p1}\n\n{p2}", size=1200, overlap=200) == [p1, p2]


def test_small_paragraph_moves_to_next_chunk_when_current_half_full() -> None:
    p1 = paragraph(0, 14)  # 699
    p2 = paragraph(20, 12)  # 599: does not fit after p1 (1300 > 1200)
    chunks = chunk_text(f"{p1}\n\n{p2}", size=1200, overlap=0)
    assert chunks == [p1, p2]


def test_paragraph_is_split_when_current_chunk_is_mostly_empty() -> None:
    p1 = paragraph(0, 2)  # 99 chars: under half a chunk, so p2 fills the rest
    p2 = paragraph(10, 30)  # 1499
    chunks = chunk_text(f"{p1}\n\n{p2}", size=1200, overlap=0)
    first_run = " ".join(sentence(i) for i in range(10, 32))  # 22 sentences = 1099 chars
    assert chunks[0] == f"{p1}\n\n{first_run}"
    assert chunks[1] == " ".join(sentence(i) for i in range(32, 40))


def test_sentence_longer_than_a_chunk_is_split_between_words() -> None:
    words = " ".join(f"w{i:03d}" for i in range(100))  # 499 chars, no sentence end
    chunks = chunk_text(words, size=100, overlap=0)
    assert all(len(c) <= 100 for c in chunks)
    assert " ".join(chunks) == words
    assert chunks[0] == " ".join(f"w{i:03d}" for i in range(20))


def test_word_longer_than_a_chunk_is_cut() -> None:
    assert chunk_text("x" * 250, size=100, overlap=0) == ["x" * 100, "x" * 100, "x" * 50]


def test_sentence_splitting_handles_quotes_and_marks() -> None:
    assert split_sentences('He said "stop." Then left! Why? Fine') == [
        'He said "stop."',
        "Then left!",
        "Why?",
        "Fine",
    ]


def test_normalize_text_joins_lines_of_a_paragraph() -> None:
    assert normalize_text("a\r\nb  c\n \nd\u00a0e") == "a b c\n\nd e"


@pytest.mark.parametrize(("size", "overlap"), [(0, 0), (100, 100), (100, -1)])
def test_invalid_settings_raise(size: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        chunk_text("text", size=size, overlap=overlap)


def test_tiny_sentences_render_each_chunk_once(monkeypatch):
    """Rendering the current chunk per sentence made 4 MB of "a. a. a." take a minute."""
    from agentic_retrieval.sources.local import chunking

    renders = 0
    render = chunking._render

    def counting(sentences):
        nonlocal renders
        renders += 1
        return render(sentences)

    monkeypatch.setattr(chunking, "_render", counting)
    chunks = chunk_text("a. " * 30_000, size=1000, overlap=100)
    # 333 sentences of "a." per chunk, 33 of them repeated as the overlap
    assert [len(c) for c in chunks[:2]] == [998, 998] and len(chunks) == 100
    assert renders == len(chunks)  # was one per sentence: 30,000


def test_a_huge_word_is_cut_into_exact_pieces():
    word = "".join(chr(ord("a") + i % 26) for i in range(2_500_000))
    chunks = chunk_text(word, size=1000, overlap=0)
    assert len(chunks) == 2500
    assert "".join(chunks) == word


def test_tables_lists_and_headings_keep_their_lines() -> None:
    text = (
        "# Fares\n"
        "Prices as of May.\n"
        "| Ticket | Price |\n"
        "| --- | --- |\n"
        "| Day Pass | 7.50 |\n"
        "| Single | 2.40 |\n"
        "\n"
        "Bring:\n"
        "- a ticket valid for\n"
        "  the whole trip.\n"
        "- an ID. Or a passport.\n"
        "1) first\n"
        "2) second\n"
        "\n"
        "A wrapped\nline of prose.\n"
    )
    expected = (
        "# Fares\nPrices as of May.\n"
        "| Ticket | Price |\n| --- | --- |\n| Day Pass | 7.50 |\n| Single | 2.40 |\n\n"
        "Bring:\n- a ticket valid for the whole trip.\n- an ID. Or a passport.\n"
        "1) first\n2) second\n\n"
        "A wrapped line of prose."
    )
    assert normalize_text(text) == expected
    assert chunk_text(text, size=1000, overlap=0) == [expected]


def test_a_table_split_over_chunks_keeps_one_row_per_line() -> None:
    rows = "\n".join(f"| item {i} | {i}.00 EUR |" for i in range(60))
    chunks = chunk_text(f"| name | price |\n| --- | --- |\n{rows}", size=200, overlap=50)
    assert len(chunks) > 5 and all(len(c) <= 200 for c in chunks)
    for chunk in chunks:
        assert all(line.startswith("| ") and line.endswith(" |") for line in chunk.split("\n"))
    assert chunks[-1].endswith("| item 59 | 59.00 EUR |")


def test_many_wrapped_lines_join_in_linear_time() -> None:
    """A paragraph of 200,000 short lines (no blank line) must not be joined quadratically."""
    text = "word\n" * 200_000
    started = time.process_time()
    assert normalize_text(text) == " ".join(["word"] * 200_000)
    assert time.process_time() - started < 5  # quadratic joining takes minutes


def test_chunks_split_ahead_are_used_only_when_made_with_the_same_settings() -> None:
    text = "\n\n".join(paragraph(10 * n) for n in range(6))
    ahead = split_ahead(text, 600, 100)
    assert ahead == SplitText(600, 100, tuple(chunk_text(text, 600, 100)))
    assert chunks_of(text, 600, 100, ahead) == chunk_text(text, 600, 100)
    # what another split says is never taken for this one
    planted = SplitText(600, 100, ("planted",))
    assert chunks_of(text, 600, 100, planted) == ["planted"]
    assert chunks_of(text, 1200, 200, planted) == chunk_text(text, 1200, 200)
    assert chunks_of(text, 600, 50, planted) == chunk_text(text, 600, 50)
    assert chunks_of(text, 600, 100) == chunk_text(text, 600, 100)


def test_a_split_that_would_grow_the_text_past_its_bound_is_left_to_the_store() -> None:
    # 10-character sentences, 100-character chunks carrying 90 characters over: each chunk
    # adds one sentence, so the chunks would be ~9 times the text
    text = " ".join(f"S{i:04d} ab." for i in range(300))
    assert sum(map(len, chunk_text(text, 100, 90))) > 5 * len(text)
    assert split_ahead(text, 100, 90) is None
    assert split_ahead(text, 100, 0) is not None
