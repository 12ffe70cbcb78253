"""The kinds of the audit log's events: the changes to a team server's users and tokens, recorded as events without a
job by `spotrun.server.users`, and read by `GET /api/v1/audit` and `spotrun audit`. In a module of its own, importing
nothing, so that `spotrun audit --help` names them without loading pydantic or the store."""

from __future__ import annotations

from typing import Literal, get_args

AuditKind = Literal[
    "user_added", "token_created", "token_revoked", "user_disabled", "user_enabled", "admin_granted", "admin_removed",
]
AUDIT_KINDS: tuple[str, ...] = get_args(AuditKind)

# An actor that is no user: the CLI changing users on the store directly, `cli:<OS user>@<host>` (no user name holds
# a colon, so it never passes for one)
CLI_ACTOR_MARK = "cli:"
