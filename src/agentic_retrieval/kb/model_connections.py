"""``openAICompatible`` models (api-version ``2026-11-01-preview``): checked, kept secret, used.

A knowledge base's ``models[]`` entry, or a file knowledge source's ingestion model
(``fileParameters.ingestionParameters.chatCompletionModel``), may name any endpoint that
speaks OpenAI's Chat Completions (vLLM, llama.cpp's server, Ollama, a gateway)::

    {"kind": "openAICompatible",
     "openAICompatibleParameters": {"uri": "http://127.0.0.1:8000/v1/chat/completions",
                                    "modelName": "qwen3-8b",
                                    "headers": {"Authorization": "Bearer ..."}}}

As Azure's reference (``KnowledgeBaseOpenAICompatibleParameters``) states:

- ``headers`` is a non-empty map; its names and values are secret and never returned: every
  body this service answers with (create, read, list, errors) leaves ``headers`` out, and no
  message names a header.
- On update, omitted ``headers`` are kept only when the entry's endpoint (``uri``), model
  (``modelName``) and identity are unchanged; otherwise the update must send them again.
- ``headers`` and ``managedIdentityAudience`` / ``authIdentity`` are mutually exclusive.
  This service has no Microsoft Entra identity, so it refuses ``managedIdentityAudience``
  (and ``authIdentity``, allowed only beside it) with a message that says so.
- Not supported for a knowledge base with a ``web`` knowledge source.

At run time :func:`chat_model` builds ``langchain-openai``'s ``ChatOpenAI`` with the
endpoint as ``base_url`` and the headers as ``default_headers`` (the path's trailing
``/chat/completions`` or ``/responses`` chooses the API). It never falls back to the
environment's ``OPENAI_API_KEY``: that key is not sent to an endpoint a definition names
(without an ``Authorization`` header of the entry's own, the client sends ``Bearer unused``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from agentic_retrieval.errors import InvalidDefinitionError

OPENAI_COMPATIBLE = "openAICompatible"
PARAMETERS = "openAICompatibleParameters"
MODELS_VERSION = "2026-11-01-preview"
"""The api-version that defines ``openAICompatible`` models."""
INGESTION_MODEL = ("fileParameters", "ingestionParameters", "chatCompletionModel")
"""Where a knowledge source names its ingestion model."""
UNUSED_KEY = "unused"
"""The client's own API key: a placeholder, so the environment's is never picked up."""
MAX_HEADERS = 20
MAX_HEADER_NAME = 256
MAX_HEADER_VALUE = 8192
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
_SET_BY_CLIENT = frozenset({"content-type", "content-length", "host", "accept", "user-agent"})


class OpenAICompatibleParameters(BaseModel):
    """``openAICompatibleParameters`` (``KnowledgeBaseOpenAICompatibleParameters``)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    uri: str = Field(min_length=1, max_length=2048)
    model_name: str = Field(min_length=1, max_length=256)
    headers: dict[str, str] | None = None
    managed_identity_audience: str | None = None
    auth_identity: dict[str, Any] | None = None


def requested_kinds(body: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every model entry of a knowledge base or knowledge source body, with its place."""
    models = body.get("models")
    if isinstance(models, list):
        for position, entry in enumerate(models):
            if isinstance(entry, Mapping):
                yield f"models[{position}]", entry
    entry = _ingestion_model(body)
    if entry is not None:
        yield ".".join(INGESTION_MODEL), entry


def require_version(body: Mapping[str, Any], api_version: str | None) -> None:
    """Refuse an ``openAICompatible`` model under an api-version that does not define it.

    Raises:
        InvalidDefinitionError: Naming the entry and the version that defines the kind.
    """
    if api_version == MODELS_VERSION:
        return
    for where, entry in requested_kinds(body):
        if entry.get("kind") == OPENAI_COMPATIBLE:
            raise InvalidDefinitionError(
                f"{where}.kind: 'openAICompatible' models need api-version {MODELS_VERSION}"
            )


def check_models(body: Mapping[str, Any]) -> None:
    """Validate every ``openAICompatible`` entry of a definition body (headers optional).

    Raises:
        InvalidDefinitionError: Naming the field, never a header's name or value.
    """
    for where, entry in requested_kinds(body):
        if entry.get("kind") == OPENAI_COMPATIBLE:
            parameters(entry, where)


def parameters(entry: Mapping[str, Any], where: str) -> OpenAICompatibleParameters:
    """The checked parameters of one ``openAICompatible`` entry."""
    unknown = sorted(set(entry) - {"kind", PARAMETERS})
    if unknown:
        raise InvalidDefinitionError(f"{where}.{unknown[0]}: unknown property")
    raw = entry.get(PARAMETERS)
    if not isinstance(raw, Mapping):
        raise InvalidDefinitionError(f"{where}.{PARAMETERS}: required (an object)")
    at = f"{where}.{PARAMETERS}"
    try:
        params = OpenAICompatibleParameters.model_validate(raw)
    except ValidationError as exc:
        # the messages name locations and types only: never an input (a header's value)
        first = exc.errors()[0]
        location = ".".join(str(p) for p in first["loc"][:1])
        message = "unknown property" if first["type"] == "extra_forbidden" else first["msg"]
        raise InvalidDefinitionError(f"{at}.{location}: {message}") from None
    _check_uri(params.uri, f"{at}.uri")
    if params.managed_identity_audience is not None or params.auth_identity is not None:
        field = "managedIdentityAudience" if params.auth_identity is None else "authIdentity"
        if params.headers is not None:
            raise InvalidDefinitionError(
                f"{at}.{field}: cannot be combined with headers (they are mutually exclusive)"
            )
        raise InvalidDefinitionError(
            f"{at}.{field}: managed identity is not supported by this service (it has no "
            "Microsoft Entra identity); authenticate with headers"
        )
    if params.headers is not None:
        _check_headers(params.headers, f"{at}.headers")
    return params


def _check_uri(uri: str, where: str) -> None:
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidDefinitionError(f"{where}: an absolute http or https URL")
    if parts.username or parts.password:
        raise InvalidDefinitionError(f"{where}: no credentials in the URL; send them as headers")
    if parts.fragment:
        raise InvalidDefinitionError(f"{where}: no fragment (#...)")


def _check_headers(headers: Mapping[str, str], where: str) -> None:
    if not headers:
        raise InvalidDefinitionError(f"{where}: a non-empty map (empty maps are invalid)")
    if len(headers) > MAX_HEADERS:
        raise InvalidDefinitionError(f"{where}: at most {MAX_HEADERS} headers")
    for position, (name, value) in enumerate(headers.items()):
        # a position, never the name: header names are as secret as their values
        if not _TOKEN.match(name) or len(name) > MAX_HEADER_NAME:
            raise InvalidDefinitionError(
                f"{where}: header {position + 1} has an invalid name (an HTTP token of at "
                f"most {MAX_HEADER_NAME} characters)"
            )
        if name.lower() in _SET_BY_CLIENT:
            raise InvalidDefinitionError(
                f"{where}: header {position + 1} is one the client sets itself "
                "(Content-Type, Content-Length, Host, Accept, User-Agent)"
            )
        if not value or len(value) > MAX_HEADER_VALUE or any(c in value for c in "\r\n\0"):
            raise InvalidDefinitionError(
                f"{where}: header {position + 1} has an invalid value (1 to "
                f"{MAX_HEADER_VALUE} characters, no line breaks)"
            )


def keep_headers(body: dict[str, Any], stored: Mapping[str, Any] | None) -> dict[str, Any]:
    """``body`` with each ``openAICompatible`` entry's omitted headers taken from ``stored``.

    They are kept only from the stored entry at the same place whose ``uri`` and
    ``modelName`` are unchanged; a new entry, or one whose endpoint or model changed, must
    send headers.

    Raises:
        InvalidDefinitionError: An entry without headers and no unchanged stored entry.
    """
    previous = dict(requested_kinds(stored or {}))
    for where, entry in requested_kinds(body):
        if entry.get("kind") != OPENAI_COMPATIBLE:
            continue
        params = entry[PARAMETERS]
        if params.get("headers") is not None:
            continue
        old = previous.get(where)
        old_params = old.get(PARAMETERS) if old and old.get("kind") == OPENAI_COMPATIBLE else None
        same = isinstance(old_params, Mapping) and all(
            old_params.get(key) == params.get(key) for key in ("uri", "modelName")
        )
        if not same or not isinstance(old_params, Mapping) or not old_params.get("headers"):
            raise InvalidDefinitionError(
                f"{where}.{PARAMETERS}.headers: required (a new model, or its uri or modelName "
                "changed: supply fresh credentials)"
            )
        params["headers"] = dict(old_params["headers"])
    return body


def without_headers(body: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a definition body with every ``openAICompatible`` entry's headers removed."""
    public = copy.deepcopy(dict(body))
    for _, entry in requested_kinds(public):
        params = entry.get(PARAMETERS)
        if isinstance(params, dict):
            params.pop("headers", None)
    return public


def refuse_web_sources(body: Mapping[str, Any], source_kinds: Sequence[str]) -> None:
    """Refuse an ``openAICompatible`` knowledge-base model beside a ``web`` source.

    Raises:
        InvalidDefinitionError: As Azure does.
    """
    if "web" not in source_kinds:
        return
    for where, entry in requested_kinds(body):
        if where.startswith("models[") and entry.get("kind") == OPENAI_COMPATIBLE:
            raise InvalidDefinitionError(
                f"{where}: 'openAICompatible' models are not supported for knowledge bases "
                "with web knowledge sources"
            )


def first_chat_model(models: Sequence[Mapping[str, Any]] | None) -> BaseChatModel | None:
    """The chat model of a knowledge base's first ``openAICompatible`` entry (or ``None``)."""
    for entry in models or ():
        if entry.get("kind") == OPENAI_COMPATIBLE:
            return chat_model(entry)
    return None


def chat_model(entry: Mapping[str, Any]) -> BaseChatModel:
    """``ChatOpenAI`` over a stored ``openAICompatible`` entry (its headers included)."""
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    params = OpenAICompatibleParameters.model_validate(entry[PARAMETERS])
    base_url, responses = _base_url(params.uri)
    query = dict(parse_qsl(urlsplit(params.uri).query))  # e.g. a gateway's api-version
    return ChatOpenAI(
        model=params.model_name,
        base_url=base_url,
        # never the environment's OPENAI_API_KEY: without an Authorization header of the
        # definition's own, the endpoint reads "Bearer unused"
        api_key=SecretStr(UNUSED_KEY),
        default_headers=dict(params.headers or {}),
        default_query=query or None,
        use_responses_api=responses,
        max_retries=1,
    )


def _base_url(uri: str) -> tuple[str, bool]:
    """The client's base URL, and whether the path names the Responses API."""
    path = uri.split("?", 1)[0].rstrip("/")
    for suffix, responses in (("/chat/completions", False), ("/responses", True)):
        if path.endswith(suffix):
            return path[: -len(suffix)], responses
    return path, False


def _ingestion_model(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    node: Any = body
    for key in INGESTION_MODEL:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else None
