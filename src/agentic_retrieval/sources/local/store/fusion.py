"""Reciprocal rank fusion: one ranking from several (lexical and dense)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

RRF_K = 60


def reciprocal_rank_fusion(
    rankings: Iterable[Sequence[tuple[int, float]] | None],
    k: int = RRF_K,
    *,
    stand_ins: Mapping[int, int] | None = None,
) -> list[tuple[int, float]]:
    """Fuse ranked lists: each item scores ``sum(1 / (k + rank))`` over the lists (rank from 1).

    Args:
        rankings: The ranked lists, best first.
        k: The fusion's constant.
        stand_ins: Items one list cannot rank (a chunk whose vector is not made yet), with
            the rank that stands in for theirs there (their lexical rank): unknown is not
            the same as last, so a chunk waiting for its vector is not outranked by every
            chunk both lists found merely because it could be in one only.

    Ties keep the order in which items were first seen.
    """
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, (key, _) in enumerate(ranking or (), start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    for key, rank in (stand_ins or {}).items():
        scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda item: -item[1])
