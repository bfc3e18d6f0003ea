"""Create, replace and delete definitions in a service directory, with every cross-check.

The REST API and the command line both change definitions through these functions, so the
rules hold whichever way a change comes in:

- a name is unique per kind (creating an existing one is a conflict);
- a ``searchIndex`` knowledge source needs its index, a knowledge base its sources;
- an index a knowledge source reads, or a source a knowledge base uses, cannot be deleted;
- a source's kind never changes; an index's existing fields keep their type, key,
  searchable, filterable and vector settings (new fields may be added).

Each check runs inside the write transaction of :class:`ServiceDirectory`, so two processes
changing definitions at once cannot slip past each other.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from agentic_retrieval.errors import InvalidDefinitionError, ResourceConflictError
from agentic_retrieval.kb.definitions import (
    REDACTED,
    IndexDefinition,
    KnowledgeSourceDefinition,
    parse_index,
    parse_knowledge_base,
    parse_knowledge_source,
)
from agentic_retrieval.kb.service import (
    Check,
    Conditions,
    DefinitionView,
    ServiceDirectory,
    StoredDefinition,
)
from agentic_retrieval.odata import ODataError, check_fields, filter_field_names, parse_filter
from agentic_retrieval.permissions import permission_field_filter_message

_FIXED_ATTRIBUTES = (
    "type",
    "key",
    "is_searchable",
    "is_filterable",
    "dimensions",
    "permission_filter",
)
UNCONDITIONAL = Conditions()
"""No ``If-Match`` / ``If-None-Match``."""


def put_index(
    service: ServiceDirectory,
    body: dict[str, Any],
    name: str | None = None,
    conditions: Conditions = UNCONDITIONAL,
    *,
    creating: bool = False,
) -> tuple[StoredDefinition, bool]:
    """Create (``creating``: only create) or replace an index.

    Returns:
        The stored definition and whether it was created.

    Raises:
        InvalidDefinitionError: The body is invalid, or changes an existing field.
        ResourceConflictError: ``creating`` and the index exists.
        PreconditionFailedError: ``conditions`` do not hold.
    """
    index = parse_index(body, name)

    def check(view: DefinitionView, current: StoredDefinition | None) -> None:
        if current is None:
            return
        _refuse_existing(creating, "an index", index.name)
        _check_compatible(IndexDefinition.model_validate(current.body), index)

    return service.put(
        "index",
        index.name,
        _stored_body(index.to_wire()),
        conditions=conditions,
        check=check,
        with_store=True,
    )


def put_knowledge_source(
    service: ServiceDirectory,
    body: dict[str, Any],
    name: str | None = None,
    conditions: Conditions = UNCONDITIONAL,
    *,
    creating: bool = False,
) -> tuple[StoredDefinition, bool]:
    """Create or replace a knowledge source (``searchIndex`` or ``file``).

    Raises:
        UnsupportedKindError: A kind this service does not host.
        InvalidDefinitionError: An invalid body, a missing index, a change of kind.
        ResourceConflictError: ``creating`` and the source exists.
        PreconditionFailedError: ``conditions`` do not hold.
    """
    source = parse_knowledge_source(body, name)

    def check(view: DefinitionView, current: StoredDefinition | None) -> None:
        if current is not None:
            _refuse_existing(creating, "a knowledge source", source.name)
            if current.body.get("kind") != source.kind:
                raise InvalidDefinitionError(
                    f"kind: the knowledge source '{source.name}' is of kind "
                    f"{current.body.get('kind')!r}; a kind cannot change (delete and re-create it)"
                )
            _check_same_permission_options(
                KnowledgeSourceDefinition.model_validate(current.body), source
            )
        index = source.index_name
        if index is None:
            return
        stored_index = view.get("index", index)
        if stored_index is None:
            raise InvalidDefinitionError(
                f"searchIndexParameters.searchIndexName: no index named '{index}' exists; "
                "create it first"
            )
        params = source.search_index_parameters
        if params is not None and params.base_filter:
            check_base_filter(params.base_filter, IndexDefinition.model_validate(stored_index.body))

    stored = _stored_body(source.to_wire())
    if stored.get("fileParameters") is not None:
        stored["fileParameters"].pop("createdResources", None)  # read-only
    return service.put(
        "knowledgeSource",
        source.name,
        stored,
        conditions=conditions,
        check=check,
        with_store=source.kind == "file",
    )


def check_base_filter(text: str, index: IndexDefinition) -> None:
    """Refuse a ``baseFilter`` that every search of the source would fail on or ignore.

    It is checked as a ``filterAddOn`` or a ``docs/search`` filter is: valid OData, naming
    the index's filterable fields with values of their kinds, and no permission field.

    Raises:
        InvalidDefinitionError: Naming the field.
    """
    where = "searchIndexParameters.baseFilter"
    try:
        expr = parse_filter(text)
        refused = sorted(filter_field_names(expr) & index.permission_field_names)
        if refused:
            raise InvalidDefinitionError(f"{where}: {permission_field_filter_message(refused[0])}")
        check_fields(expr, index.filter_schema())
    except ODataError as exc:
        raise InvalidDefinitionError(f"{where}: {exc}") from exc


def put_knowledge_base(
    service: ServiceDirectory,
    body: dict[str, Any],
    name: str | None = None,
    conditions: Conditions = UNCONDITIONAL,
    *,
    creating: bool = False,
    reserved: Collection[str] = (),
) -> tuple[StoredDefinition, bool]:
    """Create or replace a knowledge base.

    Args:
        service: The data directory.
        body: The wire body.
        name: The name in the URL, if any.
        conditions: ``If-Match`` / ``If-None-Match``.
        creating: Only create (an existing name is a conflict).
        reserved: Names served read-only from elsewhere (``--kb`` directories).

    Raises:
        InvalidDefinitionError: An invalid body or a missing knowledge source.
        ResourceConflictError: ``creating`` and the base exists, or a reserved name.
        PreconditionFailedError: ``conditions`` do not hold.
    """
    base = parse_knowledge_base(body, name)
    refuse_reserved(base.name, reserved)

    def check(view: DefinitionView, current: StoredDefinition | None) -> None:
        if current is not None:
            _refuse_existing(creating, "a knowledge base", base.name)
        missing = [n for n in base.source_names if view.get("knowledgeSource", n) is None]
        if missing:
            raise InvalidDefinitionError(
                f"knowledgeSources: no knowledge source named {', '.join(map(repr, missing))} "
                "exists; create it first"
            )

    current = service.get("knowledgeBase", base.name)
    body = _keep_redacted_keys(_stored_body(base.to_wire()), current)
    return service.put("knowledgeBase", base.name, body, conditions=conditions, check=check)


def delete_index(
    service: ServiceDirectory, name: str, conditions: Conditions = UNCONDITIONAL
) -> StoredDefinition | None:
    """Delete an index and its documents (``None`` if there was none).

    Raises:
        ResourceConflictError: A knowledge source reads it.
        PreconditionFailedError: ``conditions`` do not hold.
    """
    return service.delete("index", name, conditions=conditions, check=_unused_index(name))


def delete_knowledge_source(
    service: ServiceDirectory, name: str, conditions: Conditions = UNCONDITIONAL
) -> StoredDefinition | None:
    """Delete a knowledge source (and a file source's files).

    Raises:
        ResourceConflictError: A knowledge base uses it.
        PreconditionFailedError: ``conditions`` do not hold.
    """
    return service.delete(
        "knowledgeSource", name, conditions=conditions, check=_unused_source(name)
    )


def delete_knowledge_base(
    service: ServiceDirectory,
    name: str,
    conditions: Conditions = UNCONDITIONAL,
    *,
    reserved: Collection[str] = (),
) -> StoredDefinition | None:
    """Delete a knowledge base.

    Raises:
        ResourceConflictError: A reserved (read-only) name.
        PreconditionFailedError: ``conditions`` do not hold.
    """
    refuse_reserved(name, reserved)
    return service.delete("knowledgeBase", name, conditions=conditions)


def refuse_reserved(name: str, reserved: Collection[str]) -> None:
    """Refuse to change a knowledge base served read-only from a ``--kb`` directory."""
    if name in reserved:
        raise ResourceConflictError(
            f"The knowledge base '{name}' is served from a knowledge-base directory and is "
            "read-only over REST."
        )


def _refuse_existing(creating: bool, what: str, name: str) -> None:
    if creating:
        raise ResourceConflictError(
            f"{what.capitalize()} named '{name}' already exists; update it with PUT or choose "
            "another name."
        )


def _check_compatible(old: IndexDefinition, new: IndexDefinition) -> None:
    # Permissions are computed when a document is written: changing who the fields speak
    # for would leave the stored documents with stale permissions.
    if old.permission_fields != new.permission_fields:
        raise InvalidDefinitionError(
            f"permissionFilterOption / permissionFilter: the permission fields of index "
            f"'{old.name}' cannot change (delete and re-create the index)"
        )
    for field in old.fields:
        replacement = new.field(field.name)
        if replacement is None:
            raise InvalidDefinitionError(
                f"fields: the existing field {field.name!r} cannot be removed from index "
                f"'{old.name}' (delete and re-create the index)"
            )
        for attribute in _FIXED_ATTRIBUTES:
            if getattr(field, attribute) != getattr(replacement, attribute):
                raise InvalidDefinitionError(
                    f"fields.{field.name}: {attribute.removeprefix('is_')} cannot change on an "
                    f"existing field of index '{old.name}' (delete and re-create the index)"
                )


def _check_same_permission_options(
    old: KnowledgeSourceDefinition, new: KnowledgeSourceDefinition
) -> None:
    """Uploaded files carry the permissions their source ingested: the options are fixed."""
    before = old.file_parameters.permission_options if old.file_parameters else frozenset()
    after = new.file_parameters.permission_options if new.file_parameters else frozenset()
    if before != after:
        raise InvalidDefinitionError(
            "fileParameters.ingestionParameters.ingestionPermissionOptions: cannot change on "
            f"the existing knowledge source '{old.name}' (delete and re-create it)"
        )


def _unused_index(name: str) -> Check:
    def check(view: DefinitionView, current: StoredDefinition | None) -> None:
        users = [
            d.name
            for d in view.definitions("knowledgeSource")
            if (d.body.get("searchIndexParameters") or {}).get("searchIndexName") == name
        ]
        if users:
            raise ResourceConflictError(
                f"The index '{name}' is used by knowledge source(s) {', '.join(users)}; "
                "delete them first."
            )

    return check


def _unused_source(name: str) -> Check:
    def check(view: DefinitionView, current: StoredDefinition | None) -> None:
        users = [
            d.name
            for d in view.definitions("knowledgeBase")
            if any(ref.get("name") == name for ref in d.body.get("knowledgeSources") or [])
        ]
        if users:
            raise ResourceConflictError(
                f"The knowledge source '{name}' is used by knowledge base(s) "
                f"{', '.join(users)}; remove it from them (or delete them) first."
            )

    return check


def _keep_redacted_keys(body: dict[str, Any], current: StoredDefinition | None) -> dict[str, Any]:
    """A model ``apiKey`` sent back as ``<redacted>`` (as a GET shows it) keeps the stored key."""
    stored = (current.body.get("models") or []) if current is not None else []
    for position, model in enumerate(body.get("models") or []):
        for kind, params in model.items():
            if isinstance(params, dict) and params.get("apiKey") == REDACTED:
                previous = stored[position].get(kind, {}) if position < len(stored) else {}
                params["apiKey"] = previous.get("apiKey", REDACTED)
    return body


def _stored_body(wire: dict[str, Any]) -> dict[str, Any]:
    wire.pop("@odata.etag", None)
    return wire
