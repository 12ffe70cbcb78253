"""Per-attempt agent tokens: derived from a secret kept in the store, so a relaunch after a controller crash
hands the agent the same token without the store ever holding it in clear."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from sqlalchemy.orm import Session

from spotrun.state import Setting

_SECRET_KEY = "attempt_token_secret"


def attempt_token(secret: str, client_token: str) -> str:
    return hmac.new(secret.encode(), client_token.encode(), hashlib.sha256).hexdigest()


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, token_hash: str) -> bool:
    return hmac.compare_digest(hash_token(token), token_hash)


def controller_secret(session: Session) -> str:
    """The store's token secret, created once (a concurrent creator's value wins, both agree after commit)."""
    row = session.get(Setting, _SECRET_KEY)
    if row is None:
        row = Setting(key=_SECRET_KEY, value=secrets.token_hex(32))
        session.add(row)
        session.flush()
    return str(row.value)
