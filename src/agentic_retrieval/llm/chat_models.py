"""Chat models by role, and structured calls that retry once and report token usage.

A role (``planning``, ``evidence``, ``answer``) resolves, in order, to: the Context's
``<role>_model`` string, the Context's ``chat_model`` string, the model object bound for the
role at build time, the model bound for all roles, and finally the environment variable
``AGENTIC_RETRIEVAL_CHAT_MODEL``. Strings are ``provider:model`` for ``init_chat_model``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from langchain_core.exceptions import OutputParserException
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from pydantic import BaseModel, ConfigDict, ValidationError

from agentic_retrieval.context import Context
from agentic_retrieval.errors import ErrorCode, ModelNotConfiguredError, ModelUnavailableError
from agentic_retrieval.graph.vocabulary import ModelRole

logger = logging.getLogger(__name__)

MODEL_ENV_VAR = "AGENTIC_RETRIEVAL_CHAT_MODEL"
SchemaT = TypeVar("SchemaT", bound=BaseModel)


@functools.lru_cache(maxsize=16)
def _init_model(spec: str) -> BaseChatModel:
    from langchain.chat_models import init_chat_model

    try:
        return init_chat_model(spec)
    except Exception as exc:  # provider packages raise many types; all mean "unusable"
        raise ModelUnavailableError(f"chat model {spec!r} cannot be created: {exc}") from exc


@dataclass
class ChatModels:
    """The chat models bound at build time, by role (``default`` serves every role)."""

    default: BaseChatModel | str | None = None
    planning: BaseChatModel | str | None = None
    evidence: BaseChatModel | str | None = None
    answer: BaseChatModel | str | None = None

    def resolve(self, role: ModelRole, context: Context) -> BaseChatModel:
        """Return the model for ``role`` under ``context``.

        Raises:
            ModelNotConfiguredError: When nothing is configured for the role.
            ModelUnavailableError: The configured ``provider:model`` cannot be created.
        """
        chosen = self.choice(role, context)
        if chosen is None:
            raise ModelNotConfiguredError(role, MODEL_ENV_VAR)
        return chosen if isinstance(chosen, BaseChatModel) else _init_model(chosen)

    def is_configured(self, role: ModelRole, context: Context) -> bool:
        """Whether :meth:`resolve` would find a model (without building one)."""
        return self.choice(role, context) is not None

    def choice(self, role: ModelRole, context: Context) -> BaseChatModel | str | None:
        """The first model set for ``role``, in the order of the module docstring.

        Returns:
            A model object, a ``provider:model`` string (stripped), or ``None``.
        """
        candidates = (
            getattr(context, f"{role}_model"),
            context.chat_model,
            getattr(self, role),
            self.default,
            os.environ.get(MODEL_ENV_VAR),
        )
        for candidate in candidates:
            if isinstance(candidate, BaseChatModel):
                return candidate
            if isinstance(candidate, str) and candidate.strip():
                return candidate.strip()
        return None


@dataclass(frozen=True)
class Usage:
    """Token counts: of one model call, or summed (``a + b``) over calls and attempts."""

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    @classmethod
    def of(cls, message: BaseMessage | None) -> Usage:
        """The usage metadata of ``message`` (an AIMessage); zero when it has none."""
        meta = getattr(message, "usage_metadata", None) if message is not None else None
        if not meta:
            return cls()
        details = meta.get("output_token_details") or {}
        return cls(
            int(meta.get("input_tokens") or 0),
            int(meta.get("output_tokens") or 0),
            int(details.get("reasoning") or 0),
        )


class ModelIdentity(BaseModel):
    """Which model served a call: the ``model`` object of model activity records."""

    model_config = ConfigDict(frozen=True)

    model_name: str | None = None
    """The model's name (``gpt-4o``), as configured or as the provider reported it."""
    deployment_id: str | None = None
    """The Azure OpenAI deployment, when the model is one."""


def model_identity(model: BaseChatModel, response: BaseMessage | None = None) -> ModelIdentity:
    """The name (and Azure deployment) of ``model``, from its settings or its response.

    The configured name wins over the provider's reported one (``gpt-4o`` rather than
    ``gpt-4o-2024-08-06``), as Azure's records name the model the knowledge base was given.
    """
    configured = getattr(model, "model_name", None) or getattr(model, "model", None)
    metadata = getattr(response, "response_metadata", None) or {}
    reported = metadata.get("model_name") or metadata.get("model")
    deployment = getattr(model, "deployment_name", None) or getattr(model, "azure_deployment", None)
    name = next((n for n in (configured, reported) if isinstance(n, str) and n), None)
    return ModelIdentity(
        model_name=name or getattr(model, "_llm_type", None),
        deployment_id=deployment if isinstance(deployment, str) and deployment else None,
    )


@dataclass
class StructuredResult(Generic[SchemaT]):
    """The outcome of :func:`structured_call`: the parsed value or why there is none."""

    value: SchemaT | None
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    error_code: ErrorCode = ErrorCode.MODEL_OUTPUT_INVALID
    """``Timeout``, ``ModelError`` (the provider failed) or ``ModelOutputInvalid``."""
    model: ModelIdentity | None = None
    """The model that was called (its settings, else what its last response reported)."""
    cause: Exception | None = None
    """The last attempt's exception: for the log and for a library caller that raises its
    own error; never shown to a client (it may quote the provider)."""


async def structured_call(
    model: BaseChatModel,
    schema: type[SchemaT],
    messages: list[BaseMessage],
    *,
    config: RunnableConfig | None = None,
    timeout: float | None = None,
    attempts: int = 2,
) -> StructuredResult[SchemaT]:
    """Ask ``model`` for a ``schema`` instance, retrying once when the call or its output fails.

    LangChain does the asking (``with_structured_output``) and the retrying (``with_retry``,
    at once, without a pause); this function keeps only what they do not: one deadline over
    every attempt, the token counts of the failed attempts too (they are paid for), the model
    that answered, and an outcome instead of an exception, so the calling node degrades with
    an error record. The provider's own message stays in the server log: it may hold account
    or key fragments. Each unusable output is logged as it happens; a provider error is
    logged when it ends the call (one a retry recovered from shows in the trace, tagged
    ``retry:attempt:2`` by LangChain).

    Args:
        model: Any chat model supporting ``with_structured_output``.
        schema: The pydantic model to produce.
        messages: The prompt.
        config: Forwarded so callbacks and tracing see the call as part of the run.
        timeout: Seconds left for the whole call (all attempts); ``None`` for no bound.
        attempts: Total tries (default 2: the call and one retry).

    Returns:
        The parsed value (or ``None``), the summed usage and why there is no value.
    """
    result: StructuredResult[SchemaT] = StructuredResult(value=None, model=model_identity(model))
    mismatches: list[Exception] = []  # raised below for output that parsed but did not validate

    async def checked(out: dict[str, Any]) -> SchemaT:
        """One attempt's answer: its tokens counted, its value validated (raising retries)."""
        raw = out.get("raw")
        if isinstance(raw, AIMessage):
            result.usage += Usage.of(raw)
            result.model = model_identity(model, raw)
        parsed = out.get("parsed")
        if isinstance(parsed, dict):
            try:
                parsed = schema.model_validate(parsed)
            except ValueError as exc:
                logger.warning("model output did not match %s: %s", schema.__name__, exc)
                mismatches.append(OutputParserException(f"no {schema.__name__}: {exc}"))
                raise mismatches[-1] from exc
        if not isinstance(parsed, schema):
            problem = out.get("parsing_error")
            logger.warning("model output did not parse as %s: %s", schema.__name__, problem)
            raise OutputParserException(f"no {schema.__name__}: {problem}")
        return parsed

    attempt = model.with_structured_output(schema, include_raw=True) | RunnableLambda(checked)
    retried = attempt.with_retry(stop_after_attempt=attempts, wait_exponential_jitter=False)
    try:
        result.value = await asyncio.wait_for(retried.ainvoke(messages, config=config), timeout)
    except TimeoutError:
        result.error, result.error_code = "timed out before the model answered", ErrorCode.TIMEOUT
    except Exception as exc:  # a provider error must degrade the node, not the run
        logger.warning("structured call to %s failed: %s", schema.__name__, exc)
        result.error, result.error_code = _describe_failure(exc, schema, exc in mismatches)
        result.cause = exc
    return result


def _describe_failure(
    exc: Exception, schema: type[BaseModel], mismatch: bool
) -> tuple[str, ErrorCode]:
    """The error message and code of a call whose last attempt raised ``exc``."""
    if mismatch:
        return (
            f"the model's output did not match the {schema.__name__} schema",
            ErrorCode.MODEL_OUTPUT_INVALID,
        )
    if isinstance(exc, OutputParserException | ValidationError | ValueError):
        return (
            f"the model's output did not parse as {schema.__name__}",
            ErrorCode.MODEL_OUTPUT_INVALID,
        )
    return "the model call failed; the server log has the details", ErrorCode.MODEL_ERROR
