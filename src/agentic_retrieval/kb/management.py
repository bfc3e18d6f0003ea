"""Create, replace and delete definitions in a service directory, with every cross-check.

The REST API and the command line both change definitions through these functions, so the
rules hold whichever way a change comes in:

- a name is unique per kind (creating an existing one is a conflict);
- a ``searchIndex`` knowledge source needs its index, a knowledge base its sources;
- an index a knowledge source reads, or a source a knowledge base uses, cannot be deleted;
- a source's kind never changes; an index's existing fields keep their type, key,
  searchable, filterable and vector settings (new fields may be added);
- a create is refused (429, as Azure answers) once the service holds its limit of that kind
  (:class:`DefinitionLimits`); replacing an existing definition is not a create.

Each check runs inside the write transaction of :class:`ServiceDirectory`, so two processes
changing definitions at once cannot slip past each other.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from agentic_retrieval.errors import (
    InvalidDefinitionError,
    QuotaExceededError,
    ResourceConflictError,
)
from agentic_retrieval.kb.definitions import (
    REDACTED,
    IndexDefinition,
    KnowledgeSourceDefinition,
    parse_index,
    parse_knowledge_base,
    parse_knowledge_source,
)
from agentic_retrieval.kb.graph_extraction import check_ontology_kept
from agentic_retrieval.kb.model_connections import keep_headers, refuse_web_sources
from agentic_retrieval.kb.service import (
    Check,
    Conditions,
    DefinitionKind,
    DefinitionView,
    StoredDefinition,
)
from agentic_retrieval.kb.service_state import ServiceState
from agentic_retrieval.kb.source_kinds import SOURCE_KINDS
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
DEFAULT_MAX_DEFINITIONS = 50
"""Azure's S1 limit on indexes, knowledge sources and knowledge bases alike."""


@dataclass(frozen=True, slots=True)
class DefinitionLimits:
    """How many definitions of each kind a service holds at most (``None``: unbounded).

    Each index and each file knowledge source is a store file on disk, opened by every
    thread that searches it: without a bound a loop of creates exhausts the disk and the
    process's file handles for everyone. Azure bounds them per tier (Free 3, Basic 15, S1 50,
    S2 and S3 200, L1 and L2 10 of each); the default is S1's 50.
    """

    indexes: int | None = DEFAULT_MAX_DEFINITIONS
    knowledge_sources: int | None = DEFAULT_MAX_DEFINITIONS
    knowledge_bases: int | None = DEFAULT_MAX_DEFINITIONS

    def __post_init__(self) -> None:
        """Reject a negative limit."""
        for name in ("indexes", "knowledge_sources", "knowledge_bases"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"the limit on {name.replace('_', ' ')} must be at least 0")

    def of(self, kind: DefinitionKind) -> int | None:
        """The limit on definitions of ``kind``."""
        return {
            "index": self.indexes,
            "knowledgeSource": self.knowledge_sources,
            "knowledgeBase": self.knowledge_bases,
        }[kind]


UNLIMITED = DefinitionLimits(None, None, None)
"""No limit (the command line, which manages the directory it is given)."""


def put_index(
    service: ServiceState,
    body: dict[str, Any],
    name: str | None = None,
    conditions: Conditions = UNCONDITIONAL,
    *,
    creating: bool = False,
    limits: DefinitionLimits = UNLIMITED,
) -> tuple[StoredDefinition, bool]:
    """Create (``creating``: only create) or replace an index.

    Returns:
        The stored definition and whether it was created.

    Raises:
        InvalidDefinitionError: The body is invalid, or changes an existing field.
        ResourceConflictError: ``creating`` and the index exists.
        QuotaExceededError: A new index, and the service holds ``limits.indexes``.
        PreconditionFailedError: ``conditions`` do not hold.
    """
    index = parse_index(body, name)

    def check(view: DefinitionView, current: StoredDefinition | None) -> None:
        if current is None:
            check_quota(view, "index", index.name, limits)
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
    service: ServiceState,
    body: dict[str, Any],
    name: str | None = None,
    conditions: Conditions = UNCONDITIONAL,
    *,
    creating: bool = False,
    limits: DefinitionLimits = UNLIMITED,
) -> tuple[StoredDefinition, bool]:
    """Create or replace a knowledge source (``searchIndex`` or ``file``).

    Raises:
        UnsupportedKindError: A kind this service does not host.
        InvalidDefinitionError: An invalid body, a missing index, a change of kind.
        ResourceConflictError: ``creating`` and the source exists.
        QuotaExceededError: A new source, and the service holds ``limits.knowledge_sources``.
        PreconditionFailedError: ``conditions`` do not hold.
    """
    source = parse_knowledge_source(body, name)

    def check(view: DefinitionView, current: StoredDefinition | None) -> None:
        if current is None:
            check_quota(view, "knowledgeSource", source.name, limits)
        else:
            _refuse_existing(creating, "a knowledge source", source.name)
            if current.body.get("kind") != source.kind:
                raise InvalidDefinitionError(
                    f"kind: the knowledge source '{source.name}' is of kind "
                    f"{current.body.get('kind')!r}; a kind cannot change (delete and re-create it)"
                )
            old = KnowledgeSourceDefinition.model_validate(current.body)
            _check_same_permission_options(old, source)
            check_ontology_kept(source.name, old.ingestion, source.ingestion)
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
    current = service.get("knowledgeSource", source.name)
    stored = keep_headers(stored, current.body if current is not None else None)
    return service.put(
        "knowledgeSource",
        source.name,
        stored,
        conditions=conditions,
        check=check,
        with_store=SOURCE_KINDS[source.kind].owns_store,
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
    service: ServiceState,
    body: dict[str, Any],
    name: str | None = None,
    conditions: Conditions = UNCONDITIONAL,
    *,
    creating: bool = False,
    reserved: Collection[str] = (),
    limits: DefinitionLimits = UNLIMITED,
) -> tuple[StoredDefinition, bool]:
    """Create or replace a knowledge base.

    Args:
        service: The data directory.
        body: The wire body.
        name: The name in the URL, if any.
        conditions: ``If-Match`` / ``If-None-Match``.
        creating: Only create (an existing name is a conflict).
        reserved: Names served read-only from elsewhere (``--kb`` directories).
        limits: How many definitions the service may hold (the data directory's knowledge
            bases count; ``reserved`` ones do not).

    Raises:
        InvalidDefinitionError: An invalid body or a missing knowledge source.
        ResourceConflictError: ``creating`` and the base exists, or a reserved name.
        QuotaExceededError: A new base, and the service holds ``limits.knowledge_bases``.
        PreconditionFailedError: ``conditions`` do not hold.
    """
    base = parse_knowledge_base(body, name)
    refuse_reserved(base.name, reserved)

    def check(view: DefinitionView, current: StoredDefinition | None) -> None:
        if current is None:
            check_quota(view, "knowledgeBase", base.name, limits)
        else:
            _refuse_existing(creating, "a knowledge base", base.name)
        missing = [n for n in base.source_names if view.get("knowledgeSource", n) is None]
        if missing:
            raise InvalidDefinitionError(
                f"knowledgeSources: no knowledge source named {', '.join(map(repr, missing))} "
                "exists; create it first"
            )
        kinds = [
            str(s.body.get("kind"))
            for n in base.source_names
            if (s := view.get("knowledgeSource", n))
        ]
        refuse_web_sources(body, kinds)

    current = service.get("knowledgeBase", base.name)
    body = _keep_redacted_keys(_stored_body(base.to_wire()), current)
    body = keep_headers(body, current.body if current is not None else None)
    return service.put("knowledgeBase", base.name, body, conditions=conditions, check=check)


def delete_index(
    service: ServiceState, name: str, conditions: Conditions = UNCONDITIONAL
) -> StoredDefinition | None:
    """Delete an index and its documents (``None`` if there was none).

    Raises:
        ResourceConflictError: A knowledge source reads it.
        PreconditionFailedError: ``conditions`` do not hold.
    """
    return service.delete("index", name, conditions=conditions, check=_unused_index(name))


def delete_knowledge_source(
    service: ServiceState, name: str, conditions: Conditions = UNCONDITIONAL
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
    service: ServiceState,
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


def check_quota(
    view: DefinitionView, kind: DefinitionKind, name: str, limits: DefinitionLimits
) -> None:
    """Refuse to create ``name`` when the service already holds its limit of ``kind``.

    Runs inside the write transaction, so workers creating at once cannot pass the limit
    together. The message follows Azure's answer to a create past its index quota.

    Raises:
        QuotaExceededError: Naming the limit and how to make room.
    """
    limit = limits.of(kind)
    if limit is None or view.count(kind) < limit:
        return
    article, what, plural = _QUOTA_WORDS[kind]
    raise QuotaExceededError(
        f"{article} {what} with the name '{name}' could not be created. The {what} quota has "
        f"been exceeded for this service: delete unused {plural} first, or start the service "
        f"with a higher limit. Maximum number of {plural} allowed: {limit}"
    )


_QUOTA_WORDS: dict[DefinitionKind, tuple[str, str, str]] = {
    "index": ("An", "index", "indexes"),
    "knowledgeSource": ("A", "knowledge source", "knowledge sources"),
    "knowledgeBase": ("A", "knowledge base", "knowledge bases"),
}


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
