"""Typed definitions of what a knowledge service manages: indexes, knowledge sources, bases.

The shapes are Azure AI Search's management wire shapes (``azure-search-documents==12.0.0``
models plus the preview fields of ``2026-08-01-preview`` and ``2026-10-01``), camelCase on
the wire and snake_case in Python. :func:`parse_index`, :func:`parse_knowledge_source` and
:func:`parse_knowledge_base` validate a request body and raise
:class:`InvalidDefinitionError` with a message naming the field; ``to_wire()`` gives the body
a client reads back.

What the service acts on is typed (index fields, source parameters, the knowledge base's
retrieval settings); settings it stores but does not apply (analyzers, scoring profiles,
encryption keys, model connections...) are kept as plain JSON and returned unchanged.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from agentic_retrieval.context import Context
from agentic_retrieval.errors import InvalidDefinitionError, UnsupportedKindError
from agentic_retrieval.graph.vocabulary import OutputMode, RequestedEffort, ResultsProcessing
from agentic_retrieval.kb.graph_extraction import check_graph_extraction
from agentic_retrieval.kb.model_connections import check_models, without_headers
from agentic_retrieval.kb.topic_profiles import check_topic_graph_profiles
from agentic_retrieval.odata import FieldKind
from agentic_retrieval.wire.models import describe_validation_error

ETAG_FIELD = "@odata.etag"
HostedSourceKind = Literal["searchIndex", "file"]
"""Knowledge-source kinds this service hosts; what each does is in kb/source_kinds.py."""
SUPPORTED_SOURCE_KINDS: tuple[HostedSourceKind, ...] = get_args(HostedSourceKind)
SOURCE_PARAMETERS: dict[HostedSourceKind, tuple[str, str | None]] = {
    "searchIndex": ("search_index_parameters", "with searchIndexName"),
    "file": ("file_parameters", None),
}
"""Each hosted kind's parameters (a field of :class:`KnowledgeSourceDefinition`), and what it
must give when they are required (``None``: optional). Only a kind's own are allowed."""
KNOWN_SOURCE_KINDS = (
    "searchIndex",
    "azureBlob",
    "indexedSharePoint",
    "indexedOneLake",
    "indexedSql",
    "web",
    "remoteSharePoint",
    "workIQ",
    "file",
    "mcpServer",
    "fabricDataAgent",
    "fabricOntology",
)
"""Every kind Azure defines (``2026-08-01-preview``)."""

SIMPLE_TYPES = (
    "Edm.String",
    "Edm.Int32",
    "Edm.Int64",
    "Edm.Double",
    "Edm.Boolean",
    "Edm.DateTimeOffset",
    "Edm.GeographyPoint",
)
VECTOR_TYPES = ("Collection(Edm.Single)", "Collection(Edm.Half)", "Collection(Edm.Double)")
FLOAT32_MAX = 3.4028234663852886e38
"""Largest vector value the store keeps (it holds every vector as 32-bit floats)."""
FLOAT16_MAX = 65504.0
"""Largest ``Collection(Edm.Half)`` value."""
SUPPORTED_FIELD_TYPES = (
    *SIMPLE_TYPES,
    *(f"Collection({t})" for t in SIMPLE_TYPES if t != "Edm.GeographyPoint"),
    *VECTOR_TYPES,
)
MAX_INDEX_FIELDS = 1000
"""Most fields in an index: Azure's "maximum simple fields per index" on every tier but
Basic (100). Azure counts every field, the key included (and sub-fields of complex fields,
which this service does not support)."""
MAX_NAME_CHARS = 128
"""Longest name of an index, knowledge source, knowledge base or field (Azure's naming rules)."""
MAX_KEY_CHARS = 1024
"""Longest document key (Azure's naming rules)."""
_INDEX_NAME = re.compile(rf"[a-z0-9](?:[a-z0-9-]{{0,{MAX_NAME_CHARS - 2}}}[a-z0-9])?\Z")
_RESOURCE_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_-]{{0,{MAX_NAME_CHARS - 1}}}\Z")
_FIELD_NAME = re.compile(rf"[A-Za-z][A-Za-z0-9_]{{0,{MAX_NAME_CHARS - 1}}}\Z")
_FIELD_KINDS: dict[str, frozenset[FieldKind]] = {
    "Edm.String": frozenset({"string"}),
    "Edm.Int32": frozenset({"number"}),
    "Edm.Int64": frozenset({"number"}),
    "Edm.Double": frozenset({"number"}),
    "Edm.Boolean": frozenset({"boolean"}),
    "Edm.DateTimeOffset": frozenset({"string"}),  # stored and compared as ISO 8601 text
    "Edm.GeographyPoint": frozenset({"object"}),
}
"""The kinds of value a filter may compare each simple type with (collections: lists)."""
MAX_TAGS = 10
REDACTED = "<redacted>"
"""What a read shows instead of a model's API key (as Azure does)."""


class Definition(BaseModel):
    """Base of the definitions: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    name: str
    etag: str | None = Field(default=None, alias="@odata.etag")

    def to_wire(self) -> dict[str, Any]:
        """The JSON body a client reads back (no unset fields)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


DefinitionT = TypeVar("DefinitionT", bound=Definition)


# --- indexes -------------------------------------------------------------------------------


class IndexField(BaseModel):
    """One field of an index (``SearchField``); Azure's defaults apply to unset flags."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    name: str
    type: str
    key: bool = False
    searchable: bool | None = None
    filterable: bool | None = None
    retrievable: bool | None = None
    stored: bool | None = None
    sortable: bool | None = None
    facetable: bool | None = None
    analyzer: str | None = None
    search_analyzer: str | None = None
    index_analyzer: str | None = None
    normalizer: str | None = None
    synonym_maps: list[str] | None = None
    dimensions: int | None = Field(default=None, ge=2, le=4096)
    vector_search_profile: str | None = None
    vector_encoding: str | None = None
    fields: list[dict[str, Any]] | None = None
    permission_filter: Literal["userIds", "groupIds", "rbacScope"] | None = None
    """The field lists the user or group ids allowed to see a document (document-level
    permissions; ``rbacScope`` is not supported here)."""

    @field_validator("name")
    @classmethod
    def _field_name(cls, value: str) -> str:
        if not _FIELD_NAME.match(value):
            raise ValueError(
                f"invalid field name {value!r}: start with a letter, then letters, digits "
                "or '_' (max 128)"
            )
        return value

    @field_validator("fields")
    @classmethod
    def _no_sub_fields(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if value:
            raise ValueError(
                "sub-fields belong to complex fields (Edm.ComplexType), which this service "
                "does not support"
            )
        return value

    @field_validator("type")
    @classmethod
    def _field_type(cls, value: str) -> str:
        if value == "Edm.ComplexType" or value == "Collection(Edm.ComplexType)":
            raise ValueError("complex fields (Edm.ComplexType) are not supported by this service")
        if value not in SUPPORTED_FIELD_TYPES:
            raise ValueError(
                f"unsupported field type {value!r} (supported: {', '.join(SUPPORTED_FIELD_TYPES)})"
            )
        return value

    @property
    def is_vector(self) -> bool:
        """Whether this is a vector field."""
        return self.type in VECTOR_TYPES

    @property
    def vector_value_limit(self) -> float:
        """The largest magnitude a value of this vector field may have."""
        return FLOAT16_MAX if self.type == "Collection(Edm.Half)" else FLOAT32_MAX

    @property
    def is_text(self) -> bool:
        """Whether the field holds text (``Edm.String`` or a collection of it)."""
        return self.type in ("Edm.String", "Collection(Edm.String)")

    @property
    def is_searchable(self) -> bool:
        """Full-text searchable (Azure's default: true for text fields)."""
        return self.is_text and self.searchable is not False

    @property
    def is_filterable(self) -> bool:
        """Usable in ``$filter`` (Azure's default: true for every non-vector field)."""
        return not self.is_vector and self.filterable is not False

    @property
    def is_retrievable(self) -> bool:
        """Returned in search results and lookups (default true; ``stored: false`` hides)."""
        return self.retrievable is not False and self.stored is not False


class IndexDefinition(Definition):
    """An index (``SearchIndex``): fields plus settings kept as given."""

    description: str | None = None
    fields: list[IndexField] = Field(min_length=1)
    semantic: dict[str, Any] | None = None
    vector_search: dict[str, Any] | None = None
    scoring_profiles: list[dict[str, Any]] | None = None
    default_scoring_profile: str | None = None
    cors_options: dict[str, Any] | None = None
    suggesters: list[dict[str, Any]] | None = None
    analyzers: list[dict[str, Any]] | None = None
    tokenizers: list[dict[str, Any]] | None = None
    token_filters: list[dict[str, Any]] | None = None
    char_filters: list[dict[str, Any]] | None = None
    normalizers: list[dict[str, Any]] | None = None
    encryption_key: dict[str, Any] | None = None
    similarity: dict[str, Any] | None = None
    permission_filter_option: Literal["enabled", "disabled"] | None = None
    """Whether the ``permissionFilter`` fields trim searches. Unlike Azure (where an unset
    option leaves documents unfiltered), an index with permission fields trims unless this
    is ``disabled``: fail closed."""

    @field_validator("fields", mode="before")
    @classmethod
    def _at_most_max_fields(cls, value: Any) -> Any:
        # before the fields are validated one by one: an oversized list is refused at once
        if isinstance(value, list) and len(value) > MAX_INDEX_FIELDS:
            raise ValueError(
                f"an index has at most {MAX_INDEX_FIELDS} fields, the key field included "
                f"(Azure's limit); this one has {len(value)}"
            )
        return value

    @property
    def permission_fields(self) -> dict[str, str]:
        """``{"userIds": field, "groupIds": field}`` when permissions apply (else empty)."""
        if self.permission_filter_option == "disabled":
            return {}
        return {f.permission_filter: f.name for f in self.fields if f.permission_filter}

    @property
    def permission_field_names(self) -> frozenset[str]:
        """Every ``permissionFilter`` field: never filtered on, whatever the option says."""
        return frozenset(f.name for f in self.fields if f.permission_filter)

    def readable_fields(self, *, elevated: bool = False) -> list[IndexField]:
        """The fields a caller reads back, in the index's order.

        The retrievable ones, but a permission field only for an ``elevated`` (admin) caller.
        The one rule for every response: ``docs/search`` and lookups return these fields
        (and refuse to select others), and a retrieve (for any caller) builds its passages,
        titles and ``sourceData`` from the non-elevated ones only.
        """
        hidden = self.permission_field_names
        return [f for f in self.fields if f.is_retrievable and (elevated or f.name not in hidden)]

    def filter_schema(self) -> dict[str, frozenset[FieldKind]]:
        """The fields a filter may name (filterable, not permission fields), with their kinds.

        One schema for ``docs/search`` filters and a retrieve's ``filterAddOn``, so both
        refuse the same filters.
        """
        hidden = self.permission_field_names
        return {
            f.name: _FIELD_KINDS.get(f.type, frozenset({"collection"}))
            for f in self.fields
            if f.is_filterable and f.name not in hidden
        }

    @property
    def key_field(self) -> IndexField:
        """The key field (validation guarantees exactly one)."""
        return next(f for f in self.fields if f.key)

    @property
    def vector_field(self) -> IndexField | None:
        """The vector field, if the index has one."""
        return next((f for f in self.fields if f.is_vector), None)

    def field(self, name: str) -> IndexField | None:
        """The field called ``name``."""
        return next((f for f in self.fields if f.name == name), None)

    def title_field(self, configuration: str | None = None) -> str | None:
        """The semantic configuration's title field (the default or first configuration)."""
        configs = (self.semantic or {}).get("configurations") or []
        wanted = configuration or (self.semantic or {}).get("defaultConfiguration")
        chosen = next((c for c in configs if c.get("name") == wanted), None)
        if chosen is None and configs:
            chosen = configs[0]
        title = ((chosen or {}).get("prioritizedFields") or {}).get("titleField") or {}
        name = title.get("fieldName")
        return name if isinstance(name, str) and self.field(name) is not None else None


# --- knowledge sources ---------------------------------------------------------------------


class FieldReference(BaseModel):
    """``{"name": field}`` (``SearchIndexFieldReference``)."""

    model_config = ConfigDict(extra="forbid")

    name: str


class SearchIndexParameters(BaseModel):
    """``searchIndexParameters`` of a ``searchIndex`` knowledge source."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    search_index_name: str
    source_data_fields: list[FieldReference] | None = None
    search_fields: list[FieldReference] | None = None
    semantic_configuration_name: str | None = None
    base_filter: str | None = None
    query_hints: dict[str, Any] | None = None


class FileParameters(BaseModel):
    """``fileParameters`` of a ``file`` knowledge source (ingestion settings kept as given)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    ingestion_parameters: dict[str, Any] | None = None
    query_hints: dict[str, Any] | None = None
    created_resources: dict[str, Any] | None = None

    @property
    def permission_options(self) -> frozenset[str]:
        """``ingestionPermissionOptions``: the permission ids uploads carry."""
        options = (self.ingestion_parameters or {}).get("ingestionPermissionOptions") or []
        return frozenset(options)


class KnowledgeSourceDefinition(Definition):
    """A knowledge source of a kind this service hosts: ``searchIndex`` or ``file``."""

    kind: HostedSourceKind
    description: str | None = None
    results_processing: ResultsProcessing | None = None
    encryption_key: dict[str, Any] | None = None
    search_index_parameters: SearchIndexParameters | None = None
    file_parameters: FileParameters | None = None
    cors_options: dict[str, Any] | None = None

    @property
    def ingestion(self) -> dict[str, Any] | None:
        """A file source's ``ingestionParameters`` (``None``: none)."""
        return self.file_parameters.ingestion_parameters if self.file_parameters else None

    @property
    def index_name(self) -> str | None:
        """The index a ``searchIndex`` source reads."""
        params = self.search_index_parameters
        return params.search_index_name if params is not None else None


# --- knowledge bases -----------------------------------------------------------------------


class KnowledgeSourceReference(BaseModel):
    """One entry of ``knowledgeSources``."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    name: str
    enable_image_serving: bool | None = None
    enable_freshness: bool | None = None


class ReasoningEffortSetting(BaseModel):
    """``retrievalReasoningEffort``: ``{"kind": ...}``."""

    model_config = ConfigDict(extra="forbid")

    kind: RequestedEffort


class RetrieveDefaults(BaseModel):
    """``retrieveDefaults``: used where a retrieve request is silent (2026-08-01-preview).

    ``rerankerThreshold`` is this service's extension (Azure sets the threshold per request
    only): the threshold of every source a request gives none for, honoured whatever the
    reranker (0 keeps every candidate; absent: the service default, see
    :data:`~agentic_retrieval.context.THRESHOLD_ENV_VAR`).
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    max_runtime_in_seconds: int | None = Field(default=None, ge=1, le=300)
    max_output_documents: int | None = Field(default=None, ge=1, le=1000)
    max_output_size_in_tokens: int | None = Field(default=None, ge=1, le=2_500_000)
    reranker_threshold: float | None = Field(default=None, ge=0.0, le=4.0)


class KnowledgeBaseSettings(BaseModel):
    """What a knowledge base sets for its retrieve requests (2026-08-01-preview fields).

    The same settings in the service's definitions (REST), a knowledge-base directory's
    manifest (CLI) and Python (:meth:`context`); a request's own values win over them.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    retrieval_instructions: str | None = Field(default=None, max_length=32_000)
    answer_instructions: str | None = Field(default=None, max_length=32_000)
    retrieve_defaults: RetrieveDefaults | None = None

    def context(self, base: Context | None = None) -> Context:
        """``base`` (default: the service defaults) with these settings applied."""
        overrides: dict[str, Any] = {}
        if self.retrieval_instructions:
            overrides["retrieval_instructions"] = self.retrieval_instructions
        if self.answer_instructions:
            overrides["answer_instructions"] = self.answer_instructions
        limits = self.retrieve_defaults or RetrieveDefaults()
        if limits.max_runtime_in_seconds is not None:
            overrides["max_runtime_seconds"] = float(limits.max_runtime_in_seconds)
        if limits.max_output_size_in_tokens is not None:
            overrides["max_output_tokens"] = limits.max_output_size_in_tokens
        if limits.max_output_documents is not None:
            overrides["max_output_documents"] = limits.max_output_documents
        if limits.reranker_threshold is not None:
            overrides["reranker_threshold"] = limits.reranker_threshold
        return dataclasses.replace(base or Context(), **overrides)


class KnowledgeBaseDefinition(Definition):
    """A knowledge base: its sources and its retrieval settings.

    ``retrievalReasoningEffort``, ``outputMode`` and ``retrieveDefaults`` apply where a
    retrieve request is silent; ``retrievalInstructions`` go into the planning prompt and
    ``answerInstructions`` into the answer prompt (as data, after the prompt's own rules).
    """

    description: str | None = None
    knowledge_sources: list[KnowledgeSourceReference] = Field(min_length=1, max_length=100)
    models: list[dict[str, Any]] | None = None
    retrieval_reasoning_effort: ReasoningEffortSetting | None = None
    output_mode: OutputMode | None = None
    retrieval_instructions: str | None = Field(default=None, max_length=32_000)
    answer_instructions: str | None = Field(default=None, max_length=32_000)
    retrieve_defaults: RetrieveDefaults | None = None
    tags: dict[str, str] | None = None
    cors_options: dict[str, Any] | None = None
    encryption_key: dict[str, Any] | None = None

    @field_validator("tags")
    @classmethod
    def _few_tags(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None and len(value) > MAX_TAGS:
            raise ValueError(f"at most {MAX_TAGS} tags")
        return value

    @property
    def settings(self) -> KnowledgeBaseSettings:
        """Its instructions and ``retrieveDefaults``."""
        return KnowledgeBaseSettings(
            retrieval_instructions=self.retrieval_instructions,
            answer_instructions=self.answer_instructions,
            retrieve_defaults=self.retrieve_defaults,
        )

    @property
    def source_names(self) -> list[str]:
        """The referenced knowledge sources, in order."""
        return [ref.name for ref in self.knowledge_sources]

    def redacted(self) -> dict[str, Any]:
        """The wire body as a read shows it: no secrets.

        Model API keys read ``<redacted>`` (as on Azure's GET); ``openAICompatible`` headers
        are left out (never returned, not even their names).
        """
        body = without_headers(self.to_wire())
        for model in body.get("models") or []:
            for params in model.values():
                if isinstance(params, dict) and params.get("apiKey"):
                    params["apiKey"] = REDACTED
        return body


# --- parsing -------------------------------------------------------------------------------


def parse_index(body: dict[str, Any], name: str | None = None) -> IndexDefinition:
    """Validate an index body; ``name`` is the name in the URL, if any.

    Raises:
        InvalidDefinitionError: Naming the field: bad name or type, no key field or several,
            duplicate field names, a non-string key, more than one vector field.
    """
    index = _validate(IndexDefinition, body, name, "index")
    _check_name(index.name, _INDEX_NAME, "index", "lowercase letters, digits and '-'")
    names = [f.name for f in index.fields]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidDefinitionError(f"fields: duplicate field name(s) {', '.join(duplicates)}")
    keys = [f for f in index.fields if f.key]
    if len(keys) != 1:
        found = "none" if not keys else ", ".join(f.name for f in keys)
        raise InvalidDefinitionError(
            f"fields: an index needs exactly one key field (key: true); found {found}"
        )
    if keys[0].type != "Edm.String":
        raise InvalidDefinitionError(
            f"fields: the key field {keys[0].name!r} must be of type Edm.String"
        )
    vectors = [f for f in index.fields if f.is_vector]
    if len(vectors) > 1:
        raise InvalidDefinitionError(
            "fields: this service supports one vector field per index; found "
            + ", ".join(f.name for f in vectors)
        )
    for field in vectors:
        if field.dimensions is None:
            raise InvalidDefinitionError(f"fields: vector field {field.name!r} needs 'dimensions'")
    _check_permission_fields(index)
    check_topic_graph_profiles(index.vector_search, has_vector_field=bool(vectors))
    return index


def _check_permission_fields(index: IndexDefinition) -> None:
    kinds = [f.permission_filter for f in index.fields if f.permission_filter]
    for field in index.fields:
        if field.permission_filter == "rbacScope":
            raise InvalidDefinitionError(
                f"fields.{field.name}.permissionFilter: rbacScope (Azure RBAC scopes) is not "
                "supported by this service; use userIds or groupIds"
            )
        if field.permission_filter and field.type != "Collection(Edm.String)":
            raise InvalidDefinitionError(
                f"fields.{field.name}: a {field.permission_filter} permission field must be of "
                "type Collection(Edm.String)"
            )
    repeated = sorted({k for k in kinds if kinds.count(k) > 1})
    if repeated:
        raise InvalidDefinitionError(
            f"fields: at most one field per permissionFilter type; {', '.join(repeated)} repeats"
        )


def parse_knowledge_source(
    body: dict[str, Any], name: str | None = None
) -> KnowledgeSourceDefinition:
    """Validate a knowledge source body.

    Raises:
        UnsupportedKindError: A kind this service does not host (named in the message).
        InvalidDefinitionError: Anything else, naming the field.
    """
    kind = body.get("kind")
    if kind not in SUPPORTED_SOURCE_KINDS:
        if kind is None:
            raise InvalidDefinitionError("kind: a knowledge source needs a 'kind'")
        known = "an unknown kind" if kind not in KNOWN_SOURCE_KINDS else "a kind"
        raise UnsupportedKindError(
            f"kind: {kind!r} is {known} this service cannot host; supported kinds: "
            f"{', '.join(SUPPORTED_SOURCE_KINDS)}"
        )
    source = _validate(KnowledgeSourceDefinition, body, name, "knowledge source")
    _check_name(source.name, _RESOURCE_NAME, "knowledge source", "letters, digits, '-' and '_'")
    own, required = SOURCE_PARAMETERS[source.kind]
    if required is not None and getattr(source, own) is None:
        raise InvalidDefinitionError(
            f"{to_camel(own)}: a {source.kind} knowledge source needs {to_camel(own)} {required}"
        )
    for other, _ in SOURCE_PARAMETERS.values():
        if other != own and getattr(source, other) is not None:
            raise InvalidDefinitionError(
                f"{to_camel(other)}: not allowed on a {source.kind} knowledge source"
            )
    if source.file_parameters is not None:
        _check_permission_options(source.file_parameters)
        check_graph_extraction(source.file_parameters.ingestion_parameters)
    check_models(source.to_wire())
    return source


PERMISSION_OPTIONS = ("userIds", "groupIds")
"""The ``ingestionPermissionOptions`` this service ingests (from each upload's metadata)."""


def _check_permission_options(parameters: FileParameters) -> None:
    where = "fileParameters.ingestionParameters.ingestionPermissionOptions"
    raw = (parameters.ingestion_parameters or {}).get("ingestionPermissionOptions")
    if raw is None:
        return
    if not isinstance(raw, list) or not all(isinstance(o, str) for o in raw):
        raise InvalidDefinitionError(f"{where}: a list of permission types")
    unsupported = sorted(set(raw) - set(PERMISSION_OPTIONS))
    if unsupported:
        raise InvalidDefinitionError(
            f"{where}: {', '.join(unsupported)} not supported by this service (supported: "
            f"{', '.join(PERMISSION_OPTIONS)}, given with each uploaded file)"
        )


def parse_knowledge_base(body: dict[str, Any], name: str | None = None) -> KnowledgeBaseDefinition:
    """Validate a knowledge base body.

    Raises:
        InvalidDefinitionError: Naming the field (also for a source listed twice).
    """
    base = _validate(KnowledgeBaseDefinition, body, name, "knowledge base")
    _check_name(base.name, _RESOURCE_NAME, "knowledge base", "letters, digits, '-' and '_'")
    names = base.source_names
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidDefinitionError(
            f"knowledgeSources: knowledge source(s) listed twice: {', '.join(duplicates)}"
        )
    check_models(base.to_wire())
    return base


def _validate(
    model: type[DefinitionT], body: dict[str, Any], name: str | None, what: str
) -> DefinitionT:
    if not isinstance(body, dict):
        raise InvalidDefinitionError(f"body: a {what} must be a JSON object")
    # OData annotations a client read back and sends again are not fields
    cleaned = {k: v for k, v in body.items() if not k.startswith("@") or k == ETAG_FIELD}
    if name is not None:
        given = cleaned.setdefault("name", name)
        if given != name:
            raise InvalidDefinitionError(
                f"name: the body names {what} {given!r} but the URL names {name!r}"
            )
    try:
        return model.model_validate(cleaned)
    except ValidationError as exc:
        raise InvalidDefinitionError(describe_validation_error(exc)) from exc


def _check_name(name: str, pattern: re.Pattern[str], what: str, allowed: str) -> None:
    if not pattern.match(name):
        raise InvalidDefinitionError(f"name: invalid {what} name {name!r}: use {allowed} (max 128)")
