"""What a search restricts its candidates by, worked out once for its lexical and dense parts.

A search's filter and the caller's permissions must restrict the candidates *before* its top
hits are taken, never after (a post-filter returns fewer than ``top`` while more match).
:class:`Restriction` holds that condition in the forms the store can apply it:

- in SQL (``where``): the filter and the permission check as one condition on a chunk,
  always exact, but reading every chunk's JSON costs seconds at a million chunks;
- as tantivy clauses (:mod:`.tantivy_filters`): the permission clause and every filter
  conjunct the lexical index answers exactly from each chunk's indexed fields, in
  milliseconds; and when some conjunct has no exact tantivy equivalent, the *residual*: the
  filter in SQL, read as an allow-list of row ids (once per search, and only then).

While the outbox names documents (written, not yet in tantivy: after a crash, or during a
concurrent write) tantivy may hold a document's previous fields, so the whole condition is
then answered the SQL way.

The lexical part restricts its tantivy query (:meth:`Restriction.restrict`); the dense part
asks which of its nearest chunks pass (:meth:`Restriction.passing`) and, when few do, for the
complete set of passing chunks (:meth:`Restriction.subset`), counted and collected in tantivy.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tantivy import Query

from agentic_retrieval.sources.local.store.lexical_index import SCHEMA, LexicalIndex
from agentic_retrieval.sources.local.store.search import allowed_rids
from agentic_retrieval.sources.local.store.tantivy_filters import restrict, rid_set_query

RID_SET_MAX = 100_000
"""Largest allow-list (chunks passing the residual the SQL way) given to tantivy as a set of
row ids; past it, candidates are checked against the allow-list instead."""


@dataclass
class Restriction:
    """The condition one search's candidates must pass, in SQL and as tantivy clauses.

    Args:
        conn: The connection in the search's read transaction (every part sees one snapshot).
        index: The store's lexical index.
        where: The whole condition in SQL on ``c`` (a chunk): ``"1"`` when there is none.
        params: ``where``'s bound values.
        pending: The outbox names documents: tantivy's fields may be stale, SQL answers.
        clauses: The tantivy clauses (permission, compiled filter conjuncts); unused while
            ``pending``.
        residual: The filter as a SQL condition (and its values), without the permission
            check, when part of it has no exact tantivy equivalent; ``None`` when tantivy
            answers the whole filter.
    """

    conn: sqlite3.Connection
    index: LexicalIndex
    where: str
    params: list[Any]
    pending: bool
    clauses: list[Query] = field(default_factory=list)
    residual: tuple[str, list[Any]] | None = None
    _residual_rids: list[int] | None = field(default=None, init=False, repr=False)
    _residual_set: frozenset[int] | None = field(default=None, init=False, repr=False)

    @property
    def unrestricted(self) -> bool:
        """No filter and no permission check: every chunk is a candidate."""
        return self.where == "1"

    def restrict(self, query: Query) -> Query:
        """``query`` limited to the chunks the tantivy clauses match (scored by ``query``)."""
        return restrict(query, self.clauses)

    def residual_rids(self) -> list[int]:
        """Every chunk passing the residual the SQL way (read once per search).

        Raises:
            ValueError: There is no residual.
        """
        if self.residual is None:
            raise ValueError("the restriction has no residual")
        if self._residual_rids is None:
            where, params = self.residual
            self._residual_rids = allowed_rids(self.conn, where, params) or []
        return self._residual_rids

    def _residual_passing(self) -> frozenset[int]:
        if self._residual_set is None:
            self._residual_set = frozenset(self.residual_rids())
        return self._residual_set

    def passing(self, rids: Sequence[int]) -> set[int]:
        """Which of ``rids`` pass the whole condition (costs what ``rids`` are, not the store)."""
        if not rids:
            return set()
        if self.unrestricted:
            return set(rids)
        if self.pending:
            return _sql_passing(self.conn, rids, self.where, self.params)
        found = set(rids)
        if self.clauses:
            found = set(
                self.index.matching_rids(self.conn, self.restrict(rid_set_query(SCHEMA, rids)))
            )
        if self.residual is not None and found:
            if self._residual_rids is not None:  # read already (by the lexical part)
                found &= self._residual_passing()
            else:
                found = _sql_passing(self.conn, sorted(found), *self.residual)
        return found

    def subset(self, at_most: int) -> tuple[int, list[int] | None]:
        """How many chunks pass (at most: see below), and which, when at most ``at_most`` do.

        The count comes from tantivy; it is exact unless there is a residual whose allow-list
        is longer than :data:`RID_SET_MAX` (then it counts the chunks the clauses pass, an
        upper bound), and the rids are exact whenever they are returned.
        """
        if self.pending:
            found = allowed_rids(self.conn, self.where, self.params) or []
            return len(found), found if len(found) <= at_most else None
        if self.residual is None:
            return self.index.matches(self.conn, self.restrict(Query.all_query()), at_most)
        allowed = self.residual_rids()
        if not self.clauses:
            return len(allowed), allowed if len(allowed) <= at_most else None
        if not allowed:
            return 0, []
        if len(allowed) <= RID_SET_MAX:
            return self.index.matches(
                self.conn, self.restrict(rid_set_query(SCHEMA, allowed)), at_most
            )
        count, rids = self.index.matches(self.conn, self.restrict(Query.all_query()), at_most)
        if rids is None:
            return count, None
        passing = self._residual_passing()
        return count, [rid for rid in rids if rid in passing]


def _sql_passing(
    conn: sqlite3.Connection, rids: Sequence[int], where: str, params: list[Any]
) -> set[int]:
    """The ``rids`` passing ``where``, read the SQL way for just those chunks."""
    rows = conn.execute(
        f"SELECT c.rid FROM chunks c WHERE c.rid IN (SELECT value FROM json_each(?)) AND {where}",
        [json.dumps([int(rid) for rid in rids]), *params],
    )
    return {int(row[0]) for row in rows}
