"""What the graph derives from its state schema: the turn reset and Studio's described schemas.

Both read :mod:`agentic_retrieval.state` instead of restating it, so a new state field is
reset each turn and described in Studio without touching this module.
"""

from __future__ import annotations

import types
from dataclasses import MISSING, fields
from typing import Annotated, Any, Literal, Union, cast, get_args, get_origin, get_type_hints

from langgraph.types import Overwrite
from pydantic import Field
from typing_extensions import TypedDict

from agentic_retrieval.state import RetrievalState, Scope, Update, scope_of


def run_reset() -> Update:
    """The update that resets every ``run`` field to its schema default.

    Reduced channels get :class:`~langgraph.types.Overwrite`, so their reducer does not
    append the default to the previous turn's value. The first node of a turn returns this
    update (with its own fields over it), so no hit, flag or time limit of one turn leaks
    into the next.
    """
    reset = {
        name: (Overwrite(factory()) if reduced else factory())
        for name, factory, reduced in _RUN_DEFAULTS
    }
    return cast(Update, reset)


def described(schema: type) -> type[Any]:
    """``schema`` (input, output or :class:`Context`) as a described TypedDict.

    The graph publishes this as its input/output JSON schema: what LangGraph Studio's input
    form and the server's ``/assistants/{id}/schemas`` show. LangGraph derives that schema
    from a dataclass by channel type alone (the fields' descriptions are lost); from a
    TypedDict it keeps each field's ``Field(description=..., default=...)``. Each field's
    reducer or channel stays the last ``Annotated`` item, where LangGraph looks for it, so
    the channels are the same as the dataclass's, and so is what a run reads and returns.
    """
    hints = get_type_hints(schema, include_extras=True)
    items: dict[str, Any] = {}
    for spec in fields(schema):
        bounds = {k: spec.metadata[k] for k in ("ge", "le") if k in spec.metadata}
        hint = hints[spec.name]
        words = _with_words(hint, bounds)
        if words is not None:  # the bounds go on the number, not on the words beside it
            hint, bounds = words, {}
        info = Field(
            default=_default_factory(spec)(), description=spec.metadata["description"], **bounds
        )
        if get_origin(hint) is Annotated:
            base, *extras = get_args(hint)
            items[spec.name] = Annotated.__class_getitem__((base, info, *extras))
        else:
            items[spec.name] = Annotated[hint, info]
    # the functional form, with fields computed from the dataclass (mypy wants literals)
    typed: type[Any] = TypedDict(schema.__name__, items, total=False)  # type: ignore[misc]
    typed.__doc__ = schema.__doc__
    return typed


def _with_words(hint: Any, bounds: dict[str, Any]) -> Any:
    """``float | Literal["default"] | None`` with ``bounds`` on ``float`` (``None``: not such)."""
    if not bounds or get_origin(hint) not in (Union, types.UnionType):
        return None
    args = get_args(hint)
    typed = [a for a in args if a is not type(None) and get_origin(a) is not Literal]
    if len(typed) != 1 or len(typed) == len([a for a in args if a is not type(None)]):
        return None
    bounded = tuple(Annotated[a, Field(**bounds)] if a is typed[0] else a for a in args)
    return Union.__getitem__(bounded)


def _default_factory(spec: Any) -> Any:
    if spec.default_factory is not MISSING:
        return spec.default_factory
    value = spec.default
    return lambda: value


def _is_reduced(annotation: Any) -> bool:
    """Whether an ``Annotated`` state type carries a reducer (a function, not a channel)."""
    metadata = getattr(annotation, "__metadata__", ())
    return any(callable(m) and not isinstance(m, type) for m in metadata)


_HINTS = get_type_hints(RetrievalState, include_extras=True)
_RUN_DEFAULTS = [
    (f.name, _default_factory(f), _is_reduced(_HINTS[f.name]))
    for f in fields(RetrievalState)
    if scope_of(f.name) is Scope.RUN
]
