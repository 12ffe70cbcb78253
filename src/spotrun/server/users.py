"""Users of the team server and their API tokens.

A token reads `spr_<prefix>_<secret>`: the prefix is public and finds the row, the store keeps only the token's
SHA-256 (the secret is 256 random bits, so a fast hash is enough), and it is compared in constant time.

The CLI (`spotrun user` / `spotrun token`, acting on the store) and the HTTP API (acting for a signed-in user) share
these functions. Each change is recorded as an audit event naming its `actor`: the signed-in user, or for the CLI on the
store `cli:<OS user>@<host>` (`spotrun.cli.accounts.store_actor`); `spotrun.server.audit` reads them back.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from spotrun.audit_kinds import AuditKind
from spotrun.control.states import LIVE, state_names
from spotrun.state import Job, Store, add_event
from spotrun.state.models import ApiToken, User
from spotrun.state.write_lock import take_sqlite_write_lock

TOKEN_MARK = "spr_"
PREFIX_PATTERN = r"[A-Za-z0-9]{1,32}"  # what a token's prefix may be, unanchored (those made are 12 hex digits)
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,199}$"
_NAME = re.compile(NAME_PATTERN)


class UserError(ValueError):
    """A user or token request that cannot be done (bad name, unknown user, name taken)."""


class InvalidUserName(UserError):
    pass


class UserExists(UserError):
    pass


class UnknownUser(UserError):
    pass


class UserConflict(UserError):
    """A change the users' present state forbids (409 over HTTP)."""


class LastAdmin(UserConflict):
    """Disabling or demoting this admin would leave no enabled admin, or lock the caller out."""


class DisabledUser(UserConflict):
    """No token is made for a disabled user."""

    def __init__(self, name: str) -> None:
        super().__init__(f"user {name!r} is disabled: no token is made for them (`spotrun user enable {name}` first)")


class NotThatToken(UserError):
    """A whole token named a token to revoke, and its secret is not that token's."""

    def __init__(self, prefix: str) -> None:
        super().__init__(
            f"the token given is not token {prefix}: its secret does not match (a mangled copy?); nothing was "
            f"revoked (to revoke token {prefix}, pass its id alone)"
        )


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


@dataclass(frozen=True)
class TokenRecord:
    """What may be shown of a token: its public prefix and its dates, never its hash."""

    prefix: str
    created_at: float
    revoked_at: float | None


@dataclass(frozen=True)
class UserRecord:
    id: int
    name: str
    is_admin: bool
    created_at: float
    tokens: tuple[TokenRecord, ...]
    disabled_at: float | None = None


@dataclass(frozen=True)
class Offboarded:
    """What disabling a user did: the tokens it revoked, and how many of their jobs are still live (they run on)."""

    user: str
    revoked: tuple[str, ...]
    live_jobs: int
    already_disabled: bool


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# The owner of the jobs `spotrun launch` submits without a server (embedded mode, `jobs.submit`'s default): on the
# server's own store, a user of that name would see and cancel them.
RESERVED_NAMES = frozenset({"local"})


def check_user_name(name: str) -> str:
    if not _NAME.fullmatch(name):  # not match(): `$` would let a trailing newline through
        raise InvalidUserName(
            f"user name {name!r} must be 1-200 letters, digits or . _ @ -, starting with a letter or digit"
        )
    if name.lower() in RESERVED_NAMES:
        raise InvalidUserName(f"user name {name!r} is reserved: it owns the jobs `spotrun launch` runs without a server")
    if name.lower().startswith(TOKEN_MARK):  # logs and refusals cut what follows a token's prefix (`without_secrets`)
        raise InvalidUserName(f"user name {name!r} is reserved: a name starting {TOKEN_MARK} reads as a token")
    return name


def add_user(store: Store, name: str, now: float, *, admin: bool = False, actor: str | None = None) -> IssuedToken:
    """Create a user with a first token."""
    check_user_name(name)
    with store.session() as session:
        _refuse_taken(session, name)
        user = User(name=name, is_admin=admin, created_at=now)
        session.add(user)
        try:
            session.flush()
        except IntegrityError:  # created by a concurrent request since the check above
            raise UserExists(f"user {name!r} already exists") from None
        issued = _issue(session, user, now)
        role = "admin" if admin else "user"
        _audit(session, now, actor, "user_added", f"{role} {name} added", name, issued.prefix)
        return issued


def _refuse_taken(session: Session, name: str) -> None:
    """Names are told apart regardless of case: "Alice" beside "alice" would pass for her on every page that names an
    owner. (Names are ASCII, so the database's lower() and Python's agree.) Users stored before this rule are kept."""
    taken = session.scalar(select(User.name).where(func.lower(User.name) == name.lower()).order_by(User.id).limit(1))
    if taken == name:
        raise UserExists(f"user {name!r} already exists")
    if taken is not None:
        raise UserExists(f"user {name!r} differs only in case from the existing user {taken!r}")


def create_token(store: Store, user_name: str, now: float, *, actor: str | None = None) -> IssuedToken:
    with store.session() as session:
        user = _named(session, user_name)
        if user.disabled_at is not None:
            raise DisabledUser(user.name)
        issued = _issue(session, user, now)
        _audit(session, now, actor, "token_created", f"token {issued.prefix} created for {user.name}", user.name,
               issued.prefix)
        return issued


def _named(session: Session, name: str) -> User:
    """The user of this name, told apart regardless of case as names are; the exact name wins where users stored
    before that rule differ only in case."""
    users = session.scalars(select(User).where(func.lower(User.name) == name.lower()).order_by(User.id)).all()
    exact = [user for user in users if user.name == name]
    if exact:
        return exact[0]
    if len(users) == 1:
        return users[0]
    if not users:
        raise UnknownUser(f"no user named {name!r}")
    raise UnknownUser(f"no user named {name!r}; users differing only in case: {', '.join(u.name for u in users)}")


def revoke_token(
    store: Store, token_or_prefix: str, now: float, *, owner: str | None = None, actor: str | None = None
) -> bool:
    """Revoke the token with this prefix, or this whole token; False when none is live.

    A whole token must be the stored one (else NotThatToken, and nothing is revoked): its prefix alone chose the
    token, so a mangled paste revoked the real one. With `owner`, only that user's token is revoked: another's
    answers False, exactly like a missing one."""
    prefix = token_prefix(token_or_prefix)
    with store.session() as session:
        row = session.scalar(select(ApiToken).where(ApiToken.prefix == prefix))
        if row is None or row.revoked_at is not None or (owner is not None and row.user.name != owner):
            return False
        if token_or_prefix.startswith(TOKEN_MARK) and not _is_token_of(row, token_or_prefix):
            raise NotThatToken(prefix)
        row.revoked_at = now
        _audit(session, now, actor, "token_revoked", f"token {prefix} of {row.user.name} revoked", row.user.name,
               prefix)
        return True


def disable_user(store: Store, name: str, now: float, *, actor: str | None = None) -> Offboarded:
    """Offboard a user: revoke every live token of theirs and mark them disabled, so that none is made for them. Their
    jobs are kept and run on (an admin cancels them). Disabling a disabled user revokes what may be left."""
    with store.session() as session:
        _lock_admins(session)
        user = _named(session, name)
        if actor is not None and user.name == actor:
            raise LastAdmin(f"you cannot disable yourself ({user.name}): your own tokens would be revoked, locking "
                            "you out; another admin may disable you")
        _refuse_losing_last_admin(session, user, "disable")
        already = user.disabled_at is not None
        live = [token for token in user.tokens if token.revoked_at is None]
        for token in live:
            token.revoked_at = now
        if not already:
            user.disabled_at = now
        revoked = tuple(token.prefix for token in sorted(live, key=lambda t: t.id))
        if revoked or not already:
            _audit(session, now, actor, "user_disabled", f"user {user.name} disabled", user.name,
                   revoked_tokens=list(revoked))
        return Offboarded(user=user.name, revoked=revoked, live_jobs=_live_jobs(session, user.name),
                          already_disabled=already)


def enable_user(store: Store, name: str, now: float, *, actor: str | None = None) -> UserRecord:
    """Undo `disable_user`'s mark; no token comes back (a new one is made with `create_token`)."""
    with store.session() as session:
        user = _named(session, name)
        if user.disabled_at is not None:
            user.disabled_at = None
            _audit(session, now, actor, "user_enabled", f"user {user.name} enabled", user.name)
        return _record(user)


def set_admin(store: Store, name: str, is_admin: bool, now: float, *, actor: str | None = None) -> UserRecord:
    """Make a user an admin or not; removing the last enabled admin is refused (LastAdmin)."""
    with store.session() as session:
        _lock_admins(session)
        user = _named(session, name)
        if not is_admin:
            _refuse_losing_last_admin(session, user, "demote")
        if user.is_admin != is_admin:
            user.is_admin = is_admin
            kind, what = ("admin_granted", "made an admin") if is_admin else ("admin_removed", "made a non-admin")
            _audit(session, now, actor, kind, f"user {user.name} {what}", user.name)
        return _record(user)


def _lock_admins(session: Session) -> None:
    """First thing in a change that may remove an admin: hold what makes two such changes run one after the other, so
    that two admins disabling each other at once cannot both pass `_refuse_losing_last_admin`. On PostgreSQL the
    enabled admins' rows, in one order (in any other, two such changes deadlock); a change waiting here reads the
    rows again once the first commits. On SQLite the database's write lock (`take_sqlite_write_lock`)."""
    take_sqlite_write_lock(session)
    session.scalars(select(User.id).where(User.is_admin.is_(True), User.disabled_at.is_(None))
                    .order_by(User.id).with_for_update()).all()


def _refuse_losing_last_admin(session: Session, user: User, change: str) -> None:
    """LastAdmin when `user` is the only enabled admin (under `_lock_admins`)."""
    if not user.is_admin or user.disabled_at is not None:
        return
    others = session.scalars(
        select(User.id).where(User.is_admin.is_(True), User.disabled_at.is_(None), User.id != user.id)
    ).all()
    if not others:
        raise LastAdmin(f"cannot {change} {user.name}: they are the last enabled admin, and no one could manage "
                        "users after (make another admin first: `spotrun user set-admin NAME --admin`)")


def _live_jobs(session: Session, owner: str) -> int:
    return session.scalar(
        select(func.count()).select_from(Job).where(Job.owner == owner, Job.state.in_(state_names(LIVE)))
    ) or 0


def list_users(store: Store) -> list[UserRecord]:
    """Every user with their tokens, oldest first."""
    with store.session() as session:
        users = session.scalars(select(User).options(selectinload(User.tokens)).order_by(User.id))
        return [_record(user) for user in users]


def find_user(store: Store, name: str) -> UserRecord:
    """The user of this name (found as `create_token` finds one) with their tokens; UnknownUser when none."""
    with store.session() as session:
        return _record(_named(session, name))


def _record(user: User) -> UserRecord:
    return UserRecord(
        id=user.id, name=user.name, is_admin=user.is_admin, created_at=user.created_at, disabled_at=user.disabled_at,
        tokens=tuple(
            TokenRecord(prefix=t.prefix, created_at=t.created_at, revoked_at=t.revoked_at)
            for t in sorted(user.tokens, key=lambda t: t.id)
        ),
    )


def authenticate(session: Session, token: str) -> Principal | None:
    """The user a presented token belongs to, or None for anything unknown, malformed or revoked, or a disabled
    user's (disabling revokes their tokens; this holds should one have been missed)."""
    if not token.startswith(TOKEN_MARK):
        return None
    prefix, _ = _split(token)
    row = session.scalar(select(ApiToken).where(ApiToken.prefix == prefix))
    if row is None or row.revoked_at is not None or not _is_token_of(row, token) or row.user.disabled_at is not None:
        return None
    return Principal(name=row.user.name, is_admin=row.user.is_admin)


def _is_token_of(row: ApiToken, token: str) -> bool:
    """Whether `token` is the one stored as `row`, compared in constant time."""
    return hmac.compare_digest(token_hash(token), row.token_hash)


def _issue(session: Session, user: User, now: float) -> IssuedToken:
    prefix = secrets.token_hex(6)
    token = f"{TOKEN_MARK}{prefix}_{secrets.token_urlsafe(32)}"
    session.add(ApiToken(user_id=user.id, prefix=prefix, token_hash=token_hash(token), created_at=now))
    return IssuedToken(user=user.name, prefix=prefix, token=token)


def _audit(
    session: Session, now: float, actor: str | None, kind: AuditKind, what: str, user: str, prefix: str | None = None,
    **details: object,
) -> None:
    """An event (no job) saying who changed which user or token; it names tokens by their public prefix only. The API
    and the CLI always name an actor; None (nothing recorded) is left to code that fills a store before anyone uses
    it: tests' and benchmarks' users."""
    if actor is None:
        return
    data: dict[str, object] = {"actor": actor, "user": user}
    if prefix is not None:
        data["token_prefix"] = prefix
    add_event(session, at=now, kind=kind, message=f"{what} by {actor}", data={**data, **details})


def token_prefix(token_or_prefix: str) -> str:
    """A token's public id: its prefix, from the whole token or the prefix itself (what may be printed or logged)."""
    return _split(token_or_prefix)[0] if token_or_prefix.startswith(TOKEN_MARK) else token_or_prefix


# A token within a text (a URL, a value echoed back), a mangled one too: what follows its mark up to the first `_` (or
# `%5F`, as a query string may escape it) names it; the rest, up to what ends a URL's part or a word, is its secret.
_TOKEN_IN_TEXT = re.compile(r"""(spr_[^\s/?#&"']*?)(?:_|%5F)[^\s/?#&"']*""", re.IGNORECASE)


def without_secrets(text: str) -> str:
    """`text` with every token's secret cut off: `spr_<prefix>_...`, which still names the token by its prefix."""
    return _TOKEN_IN_TEXT.sub(r"\1_...", text)


def _split(token: str) -> tuple[str, str]:
    prefix, _, secret = token.removeprefix(TOKEN_MARK).partition("_")
    return prefix, secret
