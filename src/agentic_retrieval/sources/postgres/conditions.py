"""What a search's candidates must pass, as SQL: the caller's OData filter and permissions.

Both are conditions on ``c`` (a chunk) and ``f`` (its file), built from parsed values with
every value a bound parameter, so no text of a filter reaches into the permission check; the
store ANDs them into the query that ranks, before ``LIMIT``, never after. The semantics are
the embedded store's (:mod:`agentic_retrieval.sources.local.store.permissions`): unmarked
documents are visible unless permissions are enforced, and enforcing them on a store that
holds none is an error rather than an empty answer.
"""

from __future__ import annotations

from typing import Any

from agentic_retrieval.errors import PermissionsNotEnforceableError
from agentic_retrieval.odata import Expr
from agentic_retrieval.odata.postgres import json_path, to_postgres
from agentic_retrieval.permissions import Access
from agentic_retrieval.sources.local.store.permissions import PUBLIC, AccessSummary


def field_column(path: str) -> str:
    """A field as ``jsonb``: the chunk's own value, else the one its file's chunks share.

    A JSON ``null`` on the chunk counts as missing there, as SQLite's ``json_extract`` (and so
    the embedded store) reads it.
    """
    at = json_path(path)
    return f"coalesce(nullif(c.metadata #> {at}, 'null'::jsonb), f.fields #> {at})"


def filter_condition(filter_expr: Expr) -> tuple[str, list[Any]]:
    """The OData filter as a condition on ``c`` and ``f``."""
    sql, params = to_postgres(filter_expr, field_column)
    return f"({sql})", params


def permission_condition(summary: AccessSummary, access: Access) -> tuple[str | None, list[Any]]:
    """The permission condition on ``f`` for ``access`` (``None``: every chunk is visible).

    Raises:
        PermissionsNotEnforceableError: Enforced, and no document carries permissions.
    """
    if access.elevated:
        return None, []
    if access.enforce and not summary.has_permissions and summary.unmarked:
        raise PermissionsNotEnforceableError(
            "the store holds no permission metadata (it was indexed without permissions), "
            "so it cannot be searched while permissions are enforced"
        )
    if not summary.restricted and not (access.enforce and summary.unmarked):
        return None, []
    kinds = [f"f.access = '{PUBLIC}'"] + ([] if access.enforce else ["f.access IS NULL"])
    principals = list(access.principals())
    if principals:
        kinds.append(
            "EXISTS (SELECT 1 FROM ar_file_principals p "
            "WHERE p.file_id = f.id AND p.principal = ANY(%s::text[]))"
        )
    return f"({' OR '.join(kinds)})", [principals] if principals else []


def where(
    filter_expr: Expr | None, summary: AccessSummary, access: Access
) -> tuple[str, list[Any]]:
    """The filter AND the permission check (``TRUE`` when neither restricts)."""
    conditions: list[str] = []
    params: list[Any] = []
    if filter_expr is not None:
        sql, values = filter_condition(filter_expr)
        conditions.append(sql)
        params += values
    allowed, principals = permission_condition(summary, access)
    if allowed:
        conditions.append(allowed)
        params += principals
    return " AND ".join(conditions) or "TRUE", params
