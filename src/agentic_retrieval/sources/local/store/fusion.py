"""Reciprocal rank fusion: one ranking from several (lexical and dense)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

RRF_K = 60


def reciprocal_rank_fusion(
    rankings: Iterable[Sequence[tuple[int, float]] | None], k: int = RRF_K
) -> list[tuple[int, float]]:
    """Fuse ranked lists: each item scores ``sum(1 / (k + rank))`` over the lists (rank from 1).

    Ties keep the order in which items were first seen.
    """
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, (key, _) in enumerate(ranking or (), start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda item: -item[1])
