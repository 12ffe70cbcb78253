"""`GET /api/v1/audit`: the audit log of users and tokens, for admins only, newest first, filtered and paged; it names
tokens by their public prefix only. The changes were stored and shown nowhere. (On SQLite and PostgreSQL: `team`'s
store is each in turn.)"""

from __future__ import annotations

from typing import Any

import pytest
from server_world import Team, stored

from spotrun.server.users import add_user

AUDIT = "/api/v1/audit"


def prefix_of(token: str) -> str:
    return token.split("_")[1]


def audit(team: Team, caller: str = "root", **params: Any) -> dict[str, Any]:
    response = team.client.get(AUDIT, params=params, headers=team.as_user(caller))
    assert response.status_code == 200, response.text
    return response.json()


def changes(team: Team) -> dict[str, Any]:
    """Every kind of change, made over the API: carol added (by root), a token of alice's made (by alice), carol's
    token revoked (by root), bob disabled and enabled, alice made an admin and unmade (by root). What they made."""
    root = team.as_user("root")
    carol = team.client.post("/api/v1/users", json={"name": "carol"}, headers=root).json()
    extra = team.client.post("/api/v1/users/alice/tokens", headers=team.as_user("alice")).json()
    assert team.client.post(f"/api/v1/tokens/{carol['prefix']}/revoke", headers=root).status_code == 200
    assert team.client.post("/api/v1/users/bob/disable", headers=root).status_code == 200
    assert team.client.post("/api/v1/users/bob/enable", headers=root).status_code == 200
    assert team.client.patch("/api/v1/users/alice", json={"is_admin": True}, headers=root).status_code == 200
    assert team.client.patch("/api/v1/users/alice", json={"is_admin": False}, headers=root).status_code == 200
    return {"carol": carol, "extra": extra}


def test_an_admin_reads_every_change_newest_first_naming_tokens_by_their_prefixes_only(team: Team) -> None:
    made = changes(team)
    team.launch("alice")  # a job's events are no change to users

    page = audit(team)

    carol, extra, bob = made["carol"]["prefix"], made["extra"]["prefix"], prefix_of(team.tokens["bob"])
    assert page["next_before_id"] is None
    events = [{key: value for key, value in event.items() if key not in ("id", "at")} for event in page["events"]]
    assert events == [
        {"kind": "admin_removed", "actor": "root", "user": "alice", "token_prefix": None, "revoked_tokens": [],
         "message": "user alice made a non-admin by root"},
        {"kind": "admin_granted", "actor": "root", "user": "alice", "token_prefix": None, "revoked_tokens": [],
         "message": "user alice made an admin by root"},
        {"kind": "user_enabled", "actor": "root", "user": "bob", "token_prefix": None, "revoked_tokens": [],
         "message": "user bob enabled by root"},
        {"kind": "user_disabled", "actor": "root", "user": "bob", "token_prefix": None, "revoked_tokens": [bob],
         "message": "user bob disabled by root"},
        {"kind": "token_revoked", "actor": "root", "user": "carol", "token_prefix": carol, "revoked_tokens": [],
         "message": f"token {carol} of carol revoked by root"},
        {"kind": "token_created", "actor": "alice", "user": "alice", "token_prefix": extra, "revoked_tokens": [],
         "message": f"token {extra} created for alice by alice"},
        {"kind": "user_added", "actor": "root", "user": "carol", "token_prefix": carol, "revoked_tokens": [],
         "message": "user carol added by root"},
    ]
    ids = [event["id"] for event in page["events"]]
    assert ids == sorted(ids, reverse=True)
    assert [event["at"] for event in page["events"]] == sorted((event["at"] for event in page["events"]), reverse=True)


def test_no_token_nor_its_hash_is_ever_answered(team: Team) -> None:
    made = changes(team)
    response = team.client.get(AUDIT, headers=team.as_user("root"))
    _, tokens, _ = stored(team)
    secrets = [*team.tokens.values(), made["carol"]["token"], made["extra"]["token"],
               *(token_hash for _, token_hash, _ in tokens)]
    secrets += [token.split("_", 2)[2] for token in (*team.tokens.values(), made["carol"]["token"])]  # secrets alone
    assert response.status_code == 200 and len(response.json()["events"]) == 7
    assert not [secret for secret in secrets if secret in response.text]


def test_a_non_admin_is_refused_whatever_the_parameters_and_without_a_token_anyone(team: Team) -> None:
    changes(team)
    for params in ({}, {"user": "alice"}, {"limit": 0}, {"kind": "no_such_kind"}, {"kinds": "user_added"}):
        refused = team.client.get(AUDIT, params=params, headers=team.as_user("alice"))
        assert refused.status_code == 403 and refused.json() == {"detail": "only an admin may do this"}, params
    nobody = team.client.get(AUDIT)
    assert nobody.status_code == 401 and nobody.headers["WWW-Authenticate"] == "Bearer"


def test_a_disabled_admins_token_reads_nothing(team: Team) -> None:
    second_admin = add_user(team.store, "ops", 0.0, admin=True).token
    team.client.post("/api/v1/users/ops/disable", headers=team.as_user("root"))
    assert team.client.get(AUDIT, headers={"Authorization": f"Bearer {second_admin}"}).status_code == 401


def test_the_user_filter_matches_the_user_changed_or_the_actor_in_any_case(team: Team) -> None:
    changes(team)
    about_alice = [(e["kind"], e["actor"], e["user"]) for e in audit(team, user="ALICE")["events"]]
    assert about_alice == [("admin_removed", "root", "alice"), ("admin_granted", "root", "alice"),
                           ("token_created", "alice", "alice")]
    by_root = audit(team, user="root")["events"]
    assert len(by_root) == 6 and all(event["actor"] == "root" for event in by_root)
    assert audit(team, user="ali")["events"] == []  # a name, not a part of one
    assert audit(team, user="zed")["events"] == []  # no such user: nothing, not 404


def test_the_kind_filter_takes_one_kind_or_several(team: Team) -> None:
    changes(team)
    assert [e["kind"] for e in audit(team, kind="user_disabled")["events"]] == ["user_disabled"]
    several = team.client.get(f"{AUDIT}?kind=user_added&kind=token_revoked", headers=team.as_user("root")).json()
    assert [e["kind"] for e in several["events"]] == ["token_revoked", "user_added"]
    both = audit(team, kind="admin_granted", user="bob")
    assert both == {"events": [], "next_before_id": None}


def test_since_keeps_the_changes_at_or_after_it(team: Team) -> None:
    changes(team)
    every = audit(team)["events"]
    since = every[3]["at"]
    assert audit(team, since=since)["events"] == [event for event in every if event["at"] >= since]
    assert audit(team, since=0)["events"] == every
    assert audit(team, since=every[0]["at"] + 1)["events"] == []


def test_pages_go_back_by_before_id_through_every_change_once(team: Team) -> None:
    changes(team)
    every = audit(team)["events"]
    pages, before = [], None
    while True:
        page = audit(team, limit=3, **({"before_id": before} if before else {}))
        pages.append(page["events"])
        before = page["next_before_id"]
        if before is None:
            break
        assert before == page["events"][-1]["id"]
    assert [len(page) for page in pages] == [3, 3, 1]
    assert [event for page in pages for event in page] == every
    # a page of a filtered log: the filter holds on every page
    first = audit(team, user="alice", limit=2)
    assert len(first["events"]) == 2 and first["next_before_id"] == first["events"][-1]["id"]
    rest = audit(team, user="alice", limit=2, before_id=first["next_before_id"])
    assert [e["kind"] for e in rest["events"]] == ["token_created"] and rest["next_before_id"] is None


def test_an_exact_page_says_no_more(team: Team) -> None:
    changes(team)
    assert audit(team, limit=7)["next_before_id"] is None
    assert audit(team, limit=6)["next_before_id"] is not None


@pytest.mark.parametrize(("query", "parameter"), [
    ("limit=0", "limit"), ("limit=1001", "limit"), ("limit=ten", "limit"), ("limit=-5", "limit"),
    ("kind=user_deleted", "kind"), ("kind=user_added&kind=nope", "kind"),
    ("since=-1", "since"), ("since=nan", "since"), ("since=inf", "since"), ("since=yesterday", "since"),
    ("since=1e400", "since"),
    ("before_id=0", "before_id"), ("before_id=2147483648", "before_id"), ("before_id=x", "before_id"),
    ("user=", "user"), ("user=al%00ice", "user"), (f"user={'a' * 501}", "user"),
    ("kinds=user_added", "kinds"), ("users=alice", "users"), ("after=3", "after"),  # misspelt or unknown: not ignored
])
def test_a_bad_parameter_is_422_naming_it(team: Team, query: str, parameter: str) -> None:
    response = team.client.get(f"{AUDIT}?{query}", headers=team.as_user("root"))
    assert response.status_code == 422, response.text
    assert [problem["loc"][:2] for problem in response.json()["detail"]] == [["query", parameter]], response.text


def test_a_422_never_echoes_a_tokens_secret(team: Team) -> None:
    token = team.tokens["alice"]
    response = team.client.get(AUDIT, params={"user": token + "x" * 500}, headers=team.as_user("root"))
    assert response.status_code == 422 and f"spr_{prefix_of(token)}_..." in response.text
    assert token.split("_", 2)[2] not in response.text


def test_a_body_is_refused(team: Team) -> None:
    response = team.client.request("GET", AUDIT, json={"user": "alice"}, headers=team.as_user("root"))
    assert response.status_code == 422 and response.json()["detail"][0]["type"] == "body_not_allowed"
