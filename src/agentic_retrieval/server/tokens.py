"""Caller identity from a JWT: ``x-ms-query-source-authorization: Bearer <token>``.

Azure AI Search reads the end user's token from this header to trim results by document
permissions; this server does the same. A token is validated with PyJWT against the
configured issuer, audience and keys (a JWKS file or URL for asymmetric keys, or a shared
secret for development), and its ``oid`` (else ``sub``) and ``groups`` claims become the
caller's :class:`~agentic_retrieval.permissions.Identity`.

Everything fails closed: an unsigned (``alg: none``), wrongly signed, expired, not yet valid,
foreign (issuer, audience), malformed or oversized token is refused with the reason, and the
token itself is never logged or echoed.

Configuration (``serve`` options or environment variables):

=================================  =====================================================
``AGENTIC_RETRIEVAL_JWT_ISSUER``   the ``iss`` every token must carry (required)
``AGENTIC_RETRIEVAL_JWT_AUDIENCE`` an ``aud`` every token must carry (required)
``AGENTIC_RETRIEVAL_JWT_JWKS``     a JWKS file path or ``https://`` URL (asymmetric keys)
``AGENTIC_RETRIEVAL_JWT_SECRET``   a shared HMAC secret, 32+ bytes (development)
=================================  =====================================================
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
from pydantic import SecretStr

# defined in errors.py; importable from here
from agentic_retrieval.errors import InvalidTokenError as InvalidTokenError
from agentic_retrieval.permissions import Identity

logger = logging.getLogger(__name__)

HEADER = "x-ms-query-source-authorization"
"""The request header carrying the caller's token (as in Azure AI Search)."""
ENV_PREFIX = "AGENTIC_RETRIEVAL_JWT_"
MAX_TOKEN_BYTES = 8 * 1024
"""Longest token accepted; a longer header is refused before any parsing."""
MIN_SECRET_BYTES = 32
"""Shortest shared secret accepted (RFC 7518 asks for at least the hash size, 256 bits)."""
LEEWAY_SECONDS = 30
"""Clock skew tolerated on ``exp`` and ``nbf``."""
ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
SYMMETRIC = ("HS256", "HS384", "HS512")


@dataclass(frozen=True, kw_only=True)
class TokenSettings:
    """How tokens are validated.

    Attributes:
        issuer: The ``iss`` claim every token must carry.
        audience: An ``aud`` value every token must carry (this service's app id or URI).
        jwks: A JWKS file path or ``https://`` URL: asymmetric keys (``RS256``, ``ES256``...),
            chosen by the token's ``kid``.
        secret: A shared HMAC secret (``HS256``...), for development; never shown.
    """

    issuer: str
    audience: str
    jwks: str | None = None
    secret: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        """Refuse settings that would accept tokens they should not.

        Raises:
            ValueError: No issuer or audience, neither or both of ``jwks`` and ``secret``, a
                secret shorter than :data:`MIN_SECRET_BYTES`, or a JWKS URL that is not
                ``https://`` (no exception for loopback: nothing needs one).
        """
        if not self.issuer.strip() or not self.audience.strip():
            raise ValueError("token validation needs both an issuer and an audience")
        if (self.jwks is None) == (self.secret is None):
            raise ValueError(
                "token validation needs exactly one of a JWKS (file or URL) and a shared secret"
            )
        if self.secret is not None and len(self.secret.encode()) < MIN_SECRET_BYTES:
            raise ValueError(f"the shared JWT secret must be at least {MIN_SECRET_BYTES} bytes")
        if self.jwks is not None and "://" in self.jwks and not _is_https(self.jwks):
            raise ValueError(
                f"JWKS {self.jwks}: signing keys must be fetched over https:// (whoever can "
                "answer a plain-HTTP request could hand over keys that accept any token); give "
                "an https:// URL or a JWKS file"
            )

    @classmethod
    def resolve(
        cls,
        *,
        issuer: str | None = None,
        audience: str | None = None,
        jwks: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> TokenSettings | None:
        """Settings from explicit values, falling back to ``$AGENTIC_RETRIEVAL_JWT_*``.

        The secret is read from the environment only (a command-line value would show in
        the process list).

        Returns:
            The settings, or ``None`` when nothing is configured.

        Raises:
            ValueError: A partial or unsafe configuration (see :meth:`__post_init__`).
        """
        env = os.environ if environ is None else environ
        values = {
            "issuer": issuer or env.get(ENV_PREFIX + "ISSUER") or None,
            "audience": audience or env.get(ENV_PREFIX + "AUDIENCE") or None,
            "jwks": jwks or env.get(ENV_PREFIX + "JWKS") or None,
            "secret": env.get(ENV_PREFIX + "SECRET") or None,
        }
        if not any(values.values()):
            return None
        missing = [name for name in ("issuer", "audience") if values[name] is None]
        if missing:
            raise ValueError(
                f"token validation is partly configured: give {' and '.join(missing)} too "
                f"(--jwt-{missing[0]} or ${ENV_PREFIX}{missing[0].upper()})"
            )
        return cls(
            issuer=str(values["issuer"]),
            audience=str(values["audience"]),
            jwks=values["jwks"],
            secret=values["secret"],
        )


class TokenValidator:
    """Validates tokens against :class:`TokenSettings` and reads the caller's identity.

    Args:
        settings: Issuer, audience and keys.

    Raises:
        ValueError: A JWKS file that cannot be read or holds no usable key.
    """

    def __init__(self, settings: TokenSettings) -> None:
        self.settings = settings
        self._client: jwt.PyJWKClient | None = None
        self._keys: jwt.PyJWKSet | None = None
        if settings.jwks and _is_https(settings.jwks):
            self._client = jwt.PyJWKClient(settings.jwks, cache_keys=True, timeout=10)
        elif settings.jwks:
            try:
                self._keys = jwt.PyJWKSet.from_json(Path(settings.jwks).read_text("utf-8"))
            except (OSError, ValueError, jwt.PyJWTError) as exc:
                raise ValueError(f"JWKS {settings.jwks}: {exc}") from exc

    @property
    def remote(self) -> bool:
        """Whether keys are fetched over the network (validate off the event loop)."""
        return self._client is not None

    async def aidentity(self, token: str) -> Identity:
        """:meth:`identity`, off the event loop when keys may be fetched."""
        if self.remote:
            return await asyncio.to_thread(self.identity, token)
        return self.identity(token)

    def identity(self, token: str) -> Identity:
        """The identity a valid token names.

        Raises:
            InvalidTokenError: The token is not valid here (the message says why, never what).
        """
        if len(token.encode()) > MAX_TOKEN_BYTES:
            raise InvalidTokenError(f"the token is longer than {MAX_TOKEN_BYTES} bytes")
        try:
            key, algorithms = self._key(token)
            claims = jwt.decode(
                token,
                key,
                algorithms=list(algorithms),
                audience=self.settings.audience,
                issuer=self.settings.issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise InvalidTokenError("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise InvalidTokenError("the token is not valid yet (nbf/iat)") from None
        except jwt.InvalidAudienceError:
            raise InvalidTokenError("the token is for another audience") from None
        except jwt.InvalidIssuerError:
            raise InvalidTokenError("the token is from another issuer") from None
        except jwt.InvalidSignatureError:
            raise InvalidTokenError("the token's signature does not verify") from None
        except jwt.MissingRequiredClaimError as exc:
            raise InvalidTokenError(f"the token has no '{exc.claim}' claim") from None
        except jwt.InvalidAlgorithmError:
            raise InvalidTokenError("the token's signing algorithm is not accepted") from None
        except jwt.PyJWKClientError:
            logger.warning("could not get a signing key from the JWKS %s", self.settings.jwks)
            raise InvalidTokenError("the token's signing key is unknown") from None
        except jwt.PyJWTError:
            raise InvalidTokenError("the token is malformed") from None
        return _identity(claims, token)

    def _key(self, token: str) -> tuple[Any, tuple[str, ...]]:
        if self.settings.secret is not None:
            return self.settings.secret, SYMMETRIC
        header = jwt.get_unverified_header(token)
        if header.get("alg") not in ASYMMETRIC:
            raise jwt.InvalidAlgorithmError("not an accepted algorithm")
        if self._client is not None:
            return self._client.get_signing_key_from_jwt(token), ASYMMETRIC
        assert self._keys is not None  # one of the three is configured (TokenSettings)
        kid = header.get("kid")
        keys = list(self._keys)
        if kid is None and len(keys) == 1:
            return keys[0], ASYMMETRIC
        try:
            return self._keys[str(kid)], ASYMMETRIC
        except KeyError:
            raise jwt.PyJWKClientError("no key for this kid") from None


def _identity(claims: Mapping[str, Any], token: str) -> Identity:
    user = claims.get("oid") or claims.get("sub")
    if not isinstance(user, str) or not user:
        raise InvalidTokenError("the token names no user (no 'oid' or 'sub' claim)")
    groups = claims.get("groups", [])
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise InvalidTokenError("the token's 'groups' claim is not a list of group ids")
    try:
        return Identity(user_id=user, groups=tuple(groups), token=SecretStr(token))
    except ValueError:
        raise InvalidTokenError("the token's user or group ids are too long or too many") from None


def bearer_token(value: str) -> str:
    """The token of a ``Bearer <token>`` header value (a bare token is accepted too).

    Raises:
        InvalidTokenError: An empty value, another scheme, or an oversized header.
    """
    if len(value.encode()) > MAX_TOKEN_BYTES + 16:
        raise InvalidTokenError(f"the token is longer than {MAX_TOKEN_BYTES} bytes")
    scheme, _, rest = value.strip().partition(" ")
    token = rest.strip() if scheme.lower() == "bearer" else value.strip()
    if not token or " " in token:
        raise InvalidTokenError(f"send '{HEADER}: Bearer <token>'")
    return token


def _is_https(location: str) -> bool:
    return location[:8].lower() == "https://"


def describe(settings: TokenSettings) -> str:
    """A one-line description for start-up messages (never the secret)."""
    keys = f"keys from {settings.jwks}" if settings.jwks else "a shared secret"
    return f"issuer {settings.issuer}, audience {settings.audience}, {keys}"
