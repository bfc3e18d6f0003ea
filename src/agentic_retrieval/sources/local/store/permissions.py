"""Who may see what: the permission rows of each file and the SQL that trims by them.

Permission trimming runs inside the SQL of every search (lexical, vector, browse, count),
before ranking and ``top``: a chunk is a candidate only if its file is in the set the caller
may see, built from ``file_principals`` (indexed by principal) with the caller's principals as
bound parameters. The predicate is never text a filter could be concatenated into.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from agentic_retrieval.errors import PermissionsNotEnforceableError
from agentic_retrieval.permissions import Access, Permissions

PUBLIC = "public"
RESTRICTED = "restricted"


@dataclass(frozen=True, slots=True)
class AccessSummary:
    """How many documents of a store are public, restricted (named principals) or unmarked."""

    public: int = 0
    restricted: int = 0
    unmarked: int = 0

    @property
    def has_permissions(self) -> bool:
        """Whether any document was ingested with permissions."""
        return bool(self.public or self.restricted)


def read_access_summary(conn: sqlite3.Connection) -> AccessSummary:
    """Count the store's documents by access (one grouped query)."""
    counts = dict(conn.execute("SELECT access, count(*) FROM files GROUP BY access"))
    return AccessSummary(
        public=int(counts.get(PUBLIC, 0)),
        restricted=int(counts.get(RESTRICTED, 0)),
        unmarked=int(counts.get(None, 0)),
    )


def permission_sql(summary: AccessSummary, access: Access) -> tuple[str | None, list[str]]:
    """The permission condition on ``c`` for ``access`` (``None``: every chunk is visible).

    Raises:
        PermissionsNotEnforceableError: Enforced, and no document carries permissions.
    """
    if access.elevated:
        return None, []
    if access.enforce and not summary.has_permissions and summary.unmarked:
        # no file name, no command line: callers (sources, indexes) name themselves
        raise PermissionsNotEnforceableError(
            "the store holds no permission metadata (it was indexed without permissions), "
            "so it cannot be searched while permissions are enforced"
        )
    if not summary.restricted and not (access.enforce and summary.unmarked):
        return None, []
    # Unmarked documents count as visible unless enforced. The smaller of the visible
    # and the hidden set is materialised (once per query) and probed per candidate.
    unmarked_visible = not access.enforce
    visible = summary.public + (summary.unmarked if unmarked_visible else 0)
    hidden = summary.restricted + (0 if unmarked_visible else summary.unmarked)
    principals = access.principals()
    marks = ",".join("?" for _ in principals)
    matching = f"SELECT file_id FROM file_principals WHERE principal IN ({marks})"
    unmarked = "access IS NULL"
    if visible <= hidden:
        kinds = [f"access = '{PUBLIC}'"] + ([unmarked] if unmarked_visible else [])
        sql = f"SELECT id FROM files WHERE {' OR '.join(kinds)}"
        sql += f" UNION {matching}" if principals else ""
        return f"(c.file_id IN ({sql}))", principals
    kinds = [f"access = '{RESTRICTED}'"] + ([] if unmarked_visible else [unmarked])
    sql = f"SELECT id FROM files WHERE {' OR '.join(kinds)}"
    sql += f" EXCEPT {matching}" if principals else ""
    return f"(c.file_id NOT IN ({sql}))", principals


def read_permissions(conn: sqlite3.Connection, path: str) -> Permissions | None:
    """Who may see the indexed ``path``; ``None`` when unmarked (or not indexed)."""
    row = conn.execute("SELECT id, access FROM files WHERE path = ?", (path,)).fetchone()
    if row is None or row[1] is None:
        return None
    if row[1] == PUBLIC:
        return Permissions(public=True)
    principals = [
        r[0]
        for r in conn.execute(
            "SELECT principal FROM file_principals WHERE file_id = ? ORDER BY principal", (row[0],)
        )
    ]
    return Permissions(
        user_ids=tuple(p[2:] for p in principals if p.startswith("u:")),
        group_ids=tuple(p[2:] for p in principals if p.startswith("g:")),
    )


def write_permissions(conn: sqlite3.Connection, file_id: int, permissions: Permissions) -> None:
    """Record ``permissions`` for the file ``file_id`` (its old principals already deleted)."""
    access = PUBLIC if permissions.public else RESTRICTED
    conn.execute("UPDATE files SET access = ? WHERE id = ?", (access, file_id))
    if not permissions.public:
        conn.executemany(
            "INSERT OR IGNORE INTO file_principals(file_id, principal) VALUES (?, ?)",
            [(file_id, principal) for principal in permissions.principals()],
        )
