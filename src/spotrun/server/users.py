"""Users of the team server and their API tokens.

A token reads `spr_<prefix>_<secret>`: the prefix is public and finds the row, the store keeps only the token's
SHA-256 (the secret is 256 random bits, so a fast hash is enough), and it is compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from spotrun.state import Store
from spotrun.state.models import ApiToken, User

TOKEN_MARK = "spr_"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,199}$")


class UserError(ValueError):
    """A user or token request that cannot be done (bad name, unknown user, name taken)."""


@dataclass(frozen=True)
class Principal:
    """Who a request acts for."""

    name: str
    is_admin: bool


@dataclass(frozen=True)
class IssuedToken:
    """A token just made: `token` is shown once and never stored; `prefix` names it for revocation."""

    user: str
    prefix: str
    token: str


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def add_user(store: Store, name: str, now: float, *, admin: bool = False) -> IssuedToken:
    """Create a user with a first token."""
    if not _NAME.match(name):
        raise UserError(f"user name {name!r} must be 1-200 letters, digits or . _ @ -, starting with a letter or digit")
    with store.session() as session:
        if session.scalar(select(User.id).where(User.name == name)) is not None:
            raise UserError(f"user {name!r} already exists")
        user = User(name=name, is_admin=admin, created_at=now)
        session.add(user)
        session.flush()
        return _issue(session, user, now)


def create_token(store: Store, user_name: str, now: float) -> IssuedToken:
    with store.session() as session:
        user = session.scalar(select(User).where(User.name == user_name))
        if user is None:
            raise UserError(f"no user named {user_name!r}")
        return _issue(session, user, now)


def revoke_token(store: Store, prefix: str, now: float) -> bool:
    """Revoke the token with this prefix (the whole token is accepted too); False when none is live."""
    prefix = _split(prefix)[0] if prefix.startswith(TOKEN_MARK) else prefix
    with store.session() as session:
        row = session.scalar(select(ApiToken).where(ApiToken.prefix == prefix))
        if row is None or row.revoked_at is not None:
            return False
        row.revoked_at = now
        return True


def authenticate(session: Session, token: str) -> Principal | None:
    """The user a presented token belongs to, or None for anything unknown, malformed or revoked."""
    if not token.startswith(TOKEN_MARK):
        return None
    prefix, _ = _split(token)
    row = session.scalar(select(ApiToken).where(ApiToken.prefix == prefix))
    if row is None or row.revoked_at is not None or not hmac.compare_digest(token_hash(token), row.token_hash):
        return None
    return Principal(name=row.user.name, is_admin=row.user.is_admin)


def _issue(session: Session, user: User, now: float) -> IssuedToken:
    prefix = secrets.token_hex(6)
    token = f"{TOKEN_MARK}{prefix}_{secrets.token_urlsafe(32)}"
    session.add(ApiToken(user_id=user.id, prefix=prefix, token_hash=token_hash(token), created_at=now))
    return IssuedToken(user=user.name, prefix=prefix, token=token)


def _split(token: str) -> tuple[str, str]:
    prefix, _, secret = token.removeprefix(TOKEN_MARK).partition("_")
    return prefix, secret
