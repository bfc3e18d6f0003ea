"""Document-level permissions: who a document is for, and who is asking.

- :class:`Permissions` travel with a document into a store at ingestion: the user ids and
  group ids allowed to see it, or ``public``. A document ingested without any is *unmarked*
  (what every document was before permissions existed).
- :class:`Identity` is the caller at query time: a user id and groups (from a validated
  token, or given by the application in Python). It travels beside the request in the run's
  :class:`~agentic_retrieval.context.Context`, never inside the state, the prompts or a filter,
  so neither the planner nor a caller's ``filterAddOn`` can read or change it.
- :class:`Access` is what a store applies to one search: the identity and whether
  permissions are *enforced*.

Who sees what (the same rule in every store that trims by permission):

==============================  ==========================  =======================
document                        not enforced (default)      enforced
==============================  ==========================  =======================
public                          everyone                    everyone
user ids / group ids            a matching identity         a matching identity
unmarked (no permission data)   everyone                    nobody (fail closed)
==============================  ==========================  =======================

A document with permissions is never shown to a caller they do not name, enforced or not;
enforcement adds that documents nobody gave permissions to are hidden, and that a source
which cannot trim by permission fails (an error record) instead of answering unfiltered.

As in Azure AI Search's permission fields, the id ``all`` in a user-id or group-id list
makes a document public and ``none`` names nobody.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

ALL = "all"
"""In a user-id or group-id list: every caller may see the document (Azure's convention)."""
NONE = "none"
"""In a user-id or group-id list: names nobody (Azure's convention); ignored."""
MAX_PRINCIPALS = 1000
"""Most user ids, and most group ids, on one document or one identity."""
MAX_ID_LENGTH = 256
"""Longest user or group id accepted."""
USER_PREFIX = "u:"
GROUP_PREFIX = "g:"


def _clean_ids(values: Iterable[Any], what: str) -> tuple[str, ...]:
    """Strip, dedupe and check ids (strings of 1-256 characters, at most 1000)."""
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise ValueError(f"{what} must be a list of ids, not {values!r:.40}")
    cleaned: dict[str, None] = {}
    for value in values:
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{what}: every id must be a non-empty string, not {value!r}")
        text = value.strip()
        if len(text) > MAX_ID_LENGTH:
            raise ValueError(f"{what}: an id is longer than {MAX_ID_LENGTH} characters")
        cleaned[text] = None
    if len(cleaned) > MAX_PRINCIPALS:
        raise ValueError(f"{what}: at most {MAX_PRINCIPALS} ids, got {len(cleaned)}")
    return tuple(cleaned)


class Permissions(BaseModel):
    """Who may see a document: named users, named groups, or everyone (``public``).

    ``Permissions()`` (no one named, not public) is a document nobody may see; a document
    without a ``Permissions`` at all is *unmarked* (see the module docstring).
    """

    model_config = ConfigDict(frozen=True)

    user_ids: tuple[str, ...] = ()
    group_ids: tuple[str, ...] = ()
    public: bool = False

    @field_validator("user_ids", "group_ids", mode="before")
    @classmethod
    def _ids(cls, value: Any, info: Any) -> tuple[str, ...]:
        # sorted: equal permissions compare equal whatever order the ids came in
        return tuple(sorted(_clean_ids(value or (), info.field_name)))

    @classmethod
    def from_lists(
        cls, user_ids: Iterable[str] | None = None, group_ids: Iterable[str] | None = None
    ) -> Permissions:
        """Permissions from Azure-style id lists: ``all`` means public, ``none`` nobody.

        Raises:
            ValueError: An id that is not a non-empty string, or too many ids.
        """
        users = [u for u in _clean_ids(user_ids or (), "userIds") if u.lower() != NONE]
        groups = [g for g in _clean_ids(group_ids or (), "groupIds") if g.lower() != NONE]
        public = any(i.lower() == ALL for i in (*users, *groups))
        if public:
            return cls(public=True)
        return cls(user_ids=tuple(users), group_ids=tuple(groups))

    @classmethod
    def public_document(cls) -> Permissions:
        """Everyone may see the document."""
        return cls(public=True)

    def principals(self) -> list[str]:
        """The stored principals: ``u:<user id>`` and ``g:<group id>``."""
        return [USER_PREFIX + u for u in self.user_ids] + [GROUP_PREFIX + g for g in self.group_ids]

    def to_wire(self) -> dict[str, list[str]]:
        """Azure's shape: ``{"userIds": [...], "groupIds": [...]}`` (``["all"]`` if public)."""
        if self.public:
            return {"userIds": [ALL], "groupIds": [ALL]}
        return {"userIds": list(self.user_ids), "groupIds": list(self.group_ids)}


class Identity(BaseModel):
    """The caller of one run: a user id and the groups they belong to.

    Args:
        user_id: The user's id (a token's ``oid``, else its ``sub``).
        groups: The user's group ids (a token's ``groups``).
        token: The validated token itself, kept only to pass on to a source that checks
            permissions on its own side (Azure AI Search); never shown (``repr``, dumps).
    """

    model_config = ConfigDict(frozen=True)

    user_id: str | None = Field(default=None, min_length=1, max_length=MAX_ID_LENGTH)
    groups: tuple[str, ...] = ()
    token: SecretStr | None = Field(default=None, repr=False, exclude=True)

    @field_validator("groups", mode="before")
    @classmethod
    def _groups(cls, value: Any) -> tuple[str, ...]:
        return _clean_ids(value or (), "groups")

    def principals(self) -> list[str]:
        """What this identity matches: ``u:<user id>`` and ``g:<group>`` for each group."""
        own = [USER_PREFIX + self.user_id] if self.user_id else []
        return own + [GROUP_PREFIX + g for g in self.groups]

    def may_see(self, permissions: Permissions) -> bool:
        """Whether a document with ``permissions`` is visible to this identity."""
        return permissions.public or bool(set(self.principals()) & set(permissions.principals()))


@dataclass(frozen=True, slots=True)
class Access:
    """What one search may return: the caller's identity, and whether permissions are enforced.

    Attributes:
        identity: The caller (``None``: anonymous, sees public and, unless enforced, unmarked
            documents).
        enforce: Fail closed: unmarked documents are hidden, and a store without permission
            metadata refuses to answer.
        elevated: Skip trimming altogether (an administrator reading an index); never set
            for a retrieve request.
    """

    identity: Identity | None = None
    enforce: bool = False
    elevated: bool = False

    def principals(self) -> list[str]:
        """The identity's principals (none when anonymous)."""
        return self.identity.principals() if self.identity is not None else []

    def may_see(self, permissions: Permissions | None) -> bool:
        """The visibility rule of the module docstring, for one document."""
        if self.elevated:
            return True
        if permissions is None:
            return not self.enforce
        if permissions.public:
            return True
        return self.identity is not None and self.identity.may_see(permissions)


ANONYMOUS = Access()
"""No identity, not enforced: public, unmarked, nothing restricted."""
ELEVATED = Access(elevated=True)
"""Every document, whatever its permissions (administrators only)."""


def permission_field_filter_message(name: str) -> str:
    """Why a filter may not name ``name``, a field holding document permissions.

    Its values are applied from the caller's identity; as a filter it would match nothing
    useful. Said the same by ``docs/search`` and by a retrieve's ``filterAddOn``.
    """
    return (
        f"'{name}' is a permission field; permissions are applied from the caller's identity, "
        "not from filters"
    )
