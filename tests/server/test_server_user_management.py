"""Users and tokens over HTTP: admins list and create users and make anyone's tokens; a user sees who they are,
makes and revokes only their own tokens; refusals (401/403/404/409/422) change nothing stored; no token or hash is
ever answered in a listing, written to an event or logged."""

from __future__ import annotations

import logging

import pytest
from server_world import Team, stored
from sqlalchemy import select

from spotrun.state import Event
from spotrun.state.models import User

MISSING_PREFIX = "0000000000aa"


def prefix_of(token: str) -> str:
    return token.split("_")[1]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_me_names_the_caller(team: Team) -> None:
    for name, is_admin in (("alice", False), ("root", True)):
        me = team.client.get("/api/v1/me", headers=team.as_user(name)).json()
        assert (me["name"], me["is_admin"]) == (name, is_admin)


def test_me_lists_the_callers_own_tokens_and_never_a_secret(team: Team) -> None:
    """So that anyone finds the prefix of a token of theirs to revoke: GET /users, which lists them, is admins'."""
    second = team.client.post("/api/v1/users/alice/tokens", headers=team.as_user("alice")).json()
    team.client.post(f"/api/v1/tokens/{second['prefix']}/revoke", headers=team.as_user("alice"))

    me = team.client.get("/api/v1/me", headers=team.as_user("alice")).json()
    assert [(token["prefix"], token["revoked"]) for token in me["tokens"]] == [
        (prefix_of(team.tokens["alice"]), False), (second["prefix"], True)]
    assert all(set(token) == {"prefix", "created_at", "revoked", "revoked_at"} for token in me["tokens"])
    _, tokens, _ = stored(team)
    secrets = [second["token"], *team.tokens.values(), *(token_hash for _, token_hash, _ in tokens)]
    assert not [secret for secret in secrets if secret in str(me)]


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/me"), ("GET", "/users"), ("POST", "/users"), ("POST", "/users/alice/tokens"),
    ("POST", f"/tokens/{MISSING_PREFIX}/revoke"),
])
def test_user_routes_need_a_token(team: Team, method: str, path: str) -> None:
    before = stored(team)
    response = team.client.request(method, f"/api/v1{path}", json={"name": "carol"})
    assert response.status_code == 401 and response.headers["WWW-Authenticate"] == "Bearer"
    assert stored(team) == before


def test_an_admin_lists_users_with_token_prefixes_and_never_a_secret(team: Team) -> None:
    revoked = team.client.post(f"/api/v1/tokens/{prefix_of(team.tokens['bob'])}/revoke", headers=team.as_user("root"))
    assert revoked.status_code == 200 and revoked.json() == {"prefix": prefix_of(team.tokens["bob"]), "revoked": True}

    response = team.client.get("/api/v1/users", headers=team.as_user("root"))
    assert response.status_code == 200
    listed = {user["name"]: user for user in response.json()}
    assert list(listed) == ["alice", "bob", "root"]
    assert [listed[name]["is_admin"] for name in listed] == [False, False, True]
    for name, token in team.tokens.items():
        (only,) = listed[name]["tokens"]
        assert only["prefix"] == prefix_of(token)
        assert only["revoked"] == (name == "bob") and (only["revoked_at"] is not None) == (name == "bob")
        assert set(listed[name]) == {"id", "name", "is_admin", "created_at", "disabled_at", "tokens"}
        assert listed[name]["disabled_at"] is None
        assert set(only) == {"prefix", "created_at", "revoked", "revoked_at"}
    _, tokens, _ = stored(team)
    for secret in [*team.tokens.values(), *(token_hash for _, token_hash, _ in tokens)]:
        assert secret not in response.text


def test_an_admin_creates_a_user_whose_token_is_shown_once_and_works(team: Team) -> None:
    response = team.client.post("/api/v1/users", json={"name": "carol"}, headers=team.as_user("root"))
    assert response.status_code == 201, response.text
    created = response.json()
    assert (created["user"], created["is_admin"], created["prefix"]) == ("carol", False, prefix_of(created["token"]))
    assert response.headers["Cache-Control"] == "no-store"
    me = team.client.get("/api/v1/me", headers=bearer(created["token"])).json()
    assert (me["name"], me["is_admin"]) == ("carol", False)
    listed = team.client.get("/api/v1/users", headers=team.as_user("root")).json()
    assert [token["prefix"] for user in listed if user["name"] == "carol" for token in user["tokens"]] == [
        created["prefix"]
    ]
    assert created["token"] not in str(listed)

    admin = team.client.post("/api/v1/users", json={"name": "dana", "is_admin": True}, headers=team.as_user("root"))
    assert admin.status_code == 201 and admin.json()["is_admin"] is True
    assert team.client.get("/api/v1/users", headers=bearer(admin.json()["token"])).status_code == 200


@pytest.mark.parametrize(("name", "detail"), [
    ("alice", "user 'alice' already exists"),
    # a second user told apart from alice only by case was a spoof on every page that names an owner
    ("Alice", "user 'Alice' differs only in case from the existing user 'alice'"),
])
def test_a_taken_name_in_any_case_is_409_naming_the_user_and_nothing_is_stored(team: Team, name: str, detail: str) -> None:
    before = stored(team)
    response = team.client.post("/api/v1/users", json={"name": name, "is_admin": True}, headers=team.as_user("root"))
    assert response.status_code == 409
    assert response.json() == {"detail": detail}
    assert stored(team) == before


@pytest.mark.parametrize("name", ["", "-alice", "a b", "x" * 201, "alice\n", "ali/ce", "é"])
def test_a_bad_user_name_is_422_naming_the_field_and_nothing_is_stored(team: Team, name: str) -> None:
    before = stored(team)
    response = team.client.post("/api/v1/users", json={"name": name}, headers=team.as_user("root"))
    assert response.status_code == 422
    (problem,) = response.json()["detail"]
    assert problem["loc"] == ["body", "name"]
    assert "must be 1-200 letters, digits or . _ @ -" in problem["msg"]
    assert stored(team) == before


@pytest.mark.parametrize("answer", ["yes", "on", 1])
def test_only_true_makes_an_admin(team: Team, answer: object) -> None:
    """pydantic's lax booleans made an admin of "yes", "on" and 1."""
    before = stored(team)
    response = team.client.post("/api/v1/users", json={"name": "carol", "is_admin": answer}, headers=team.as_user("root"))
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "is_admin"]
    assert stored(team) == before


def test_a_user_makes_their_own_tokens_and_an_admin_makes_anyones(team: Team) -> None:
    own = team.client.post("/api/v1/users/alice/tokens", headers=team.as_user("alice"))
    assert own.status_code == 201 and own.headers["Cache-Control"] == "no-store"
    assert own.json()["user"] == "alice" and own.json()["prefix"] == prefix_of(own.json()["token"])
    assert team.client.get("/api/v1/me", headers=bearer(own.json()["token"])).json()["name"] == "alice"
    assert team.client.get("/api/v1/me", headers=team.as_user("alice")).status_code == 200  # the old one still works

    for_bob = team.client.post("/api/v1/users/bob/tokens", headers=team.as_user("root"))
    assert for_bob.status_code == 201
    assert team.client.get("/api/v1/me", headers=bearer(for_bob.json()["token"])).json()["name"] == "bob"

    before = stored(team)
    missing = team.client.post("/api/v1/users/nobody/tokens", headers=team.as_user("root"))
    assert missing.status_code == 404 and missing.json() == {"detail": "no user named 'nobody'"}
    assert stored(team) == before


def test_a_non_admin_cannot_list_or_create_users_nor_make_anothers_token(team: Team) -> None:
    alice = team.as_user("alice")
    before = stored(team)
    forbidden = [
        team.client.get("/api/v1/users", headers=alice),
        team.client.post("/api/v1/users", json={"name": "mallory", "is_admin": True}, headers=alice),
        team.client.post("/api/v1/users", json={"name": "no good"}, headers=alice),  # refused before the body is read
        team.client.post("/api/v1/users/bob/tokens", headers=alice),
        team.client.post("/api/v1/users/nobody/tokens", headers=alice),  # the same answer: says nothing of who exists
    ]
    assert [response.status_code for response in forbidden] == [403] * 5
    assert forbidden[0].json() == {"detail": "only an admin may do this"}
    assert forbidden[3].json() == forbidden[4].json() == {"detail": "only an admin may act for another user"}
    assert stored(team) == before


def test_a_user_revokes_their_own_token_but_anothers_is_404_like_a_missing_one(team: Team) -> None:
    second = team.client.post("/api/v1/users/alice/tokens", headers=team.as_user("alice")).json()
    revoked = team.client.post(f"/api/v1/tokens/{second['prefix']}/revoke", headers=team.as_user("alice"))
    assert revoked.status_code == 200
    assert team.client.get("/api/v1/me", headers=bearer(second["token"])).status_code == 401
    assert team.client.get("/api/v1/me", headers=team.as_user("alice")).status_code == 200

    before = stored(team)
    for prefix in (prefix_of(team.tokens["bob"]), prefix_of(team.tokens["root"]), MISSING_PREFIX, second["prefix"]):
        response = team.client.post(f"/api/v1/tokens/{prefix}/revoke", headers=team.as_user("alice"))
        assert response.status_code == 404
        assert response.json() == {"detail": f"no live token with id {prefix}"}
    assert stored(team) == before
    assert team.client.get("/api/v1/me", headers=team.as_user("bob")).status_code == 200


def test_an_admin_revokes_anyones_token(team: Team) -> None:
    response = team.client.post(f"/api/v1/tokens/{prefix_of(team.tokens['bob'])}/revoke", headers=team.as_user("root"))
    assert response.status_code == 200
    assert team.client.get("/api/v1/me", headers=team.as_user("bob")).status_code == 401
    again = team.client.post(f"/api/v1/tokens/{prefix_of(team.tokens['bob'])}/revoke", headers=team.as_user("root"))
    assert again.status_code == 404


def test_changes_are_audited_in_events_without_any_credential(team: Team, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    root = team.as_user("root")
    carol = team.client.post("/api/v1/users", json={"name": "carol"}, headers=root).json()
    extra = team.client.post("/api/v1/users/alice/tokens", headers=team.as_user("alice")).json()
    team.client.post(f"/api/v1/tokens/{carol['prefix']}/revoke", headers=root)

    with team.store.session() as session:
        events = list(session.scalars(select(Event).where(Event.job_id.is_(None)).order_by(Event.id)))
        audit = [(e.kind, e.message, e.data) for e in events]
    assert audit == [
        ("user_added", "user carol added by root", {"actor": "root", "user": "carol", "token_prefix": carol["prefix"]}),
        ("token_created", f"token {extra['prefix']} created for alice by alice",
         {"actor": "alice", "user": "alice", "token_prefix": extra["prefix"]}),
        ("token_revoked", f"token {carol['prefix']} of carol revoked by root",
         {"actor": "root", "user": "carol", "token_prefix": carol["prefix"]}),
    ]
    _, tokens, _ = stored(team)
    secrets = [*team.tokens.values(), carol["token"], extra["token"], *(token_hash for _, token_hash, _ in tokens)]
    logged = "\n".join(record.getMessage() for record in caplog.records)
    for secret in secrets:
        assert secret not in str(audit) and secret not in logged


def test_an_admin_makes_a_token_for_a_user_named_in_another_case(team: Team) -> None:
    """Names are told apart regardless of case, so "ALICE" is alice: a 404 there sent admins hunting for a typo."""
    response = team.client.post("/api/v1/users/ALICE/tokens", headers=team.as_user("root"))
    assert response.status_code == 201 and response.json()["user"] == "alice"
    assert team.client.get("/api/v1/me", headers=bearer(response.json()["token"])).json()["name"] == "alice"


def test_users_stored_before_the_case_rule_keep_their_exact_names_and_no_guess_is_made(team: Team) -> None:
    with team.store.session() as session:  # both stored before names were told apart regardless of case
        session.add_all([User(name="Erin", is_admin=False, created_at=1.0), User(name="ERIN", is_admin=False, created_at=2.0)])
    exact = team.client.post("/api/v1/users/ERIN/tokens", headers=team.as_user("root"))
    assert exact.status_code == 201 and exact.json()["user"] == "ERIN"

    before = stored(team)
    ambiguous = team.client.post("/api/v1/users/erin/tokens", headers=team.as_user("root"))
    assert ambiguous.status_code == 404
    assert ambiguous.json() == {"detail": "no user named 'erin'; users differing only in case: Erin, ERIN"}
    assert stored(team) == before


def test_a_whole_token_in_the_path_revokes_it_when_its_secret_matches(team: Team) -> None:
    """Pasted into the URL, the token is exposed (a 422 echoed it whole): revoking it is what its owner wants."""
    prefix = prefix_of(team.tokens["bob"])
    before = stored(team)
    for mangled in (team.tokens["bob"][:-1], f"spr_{prefix}_wrong", f"spr_{prefix}"):
        refused = team.client.post(f"/api/v1/tokens/{mangled}/revoke", headers=team.as_user("root"))
        assert refused.status_code == 422, mangled
        assert refused.json() == {"detail": f"the token given is not token {prefix}: its secret does not match (a "
                                            f"mangled copy?); nothing was revoked (to revoke token {prefix}, pass "
                                            f"its id alone)"}
    anothers = team.client.post(f"/api/v1/tokens/{team.tokens['bob']}/revoke", headers=team.as_user("alice"))
    assert anothers.status_code == 404 and anothers.json() == {"detail": f"no live token with id {prefix}"}
    assert stored(team) == before

    revoked = team.client.post(f"/api/v1/tokens/{team.tokens['bob']}/revoke", headers=team.as_user("bob"))
    assert revoked.status_code == 200 and revoked.json() == {"prefix": prefix, "revoked": True}
    assert team.client.get("/api/v1/me", headers=team.as_user("bob")).status_code == 401


@pytest.mark.parametrize("shape", [
    lambda token: token + "!", lambda token: token.replace("spr_", "spr_x!"), lambda token: token + "x" * 300,
], ids=["bad-character", "bad-prefix", "too-long"])
def test_a_422_never_echoes_a_tokens_secret(team: Team, shape) -> None:
    token = team.tokens["bob"]
    before = stored(team)
    refused = team.client.post(f"/api/v1/tokens/{shape(token)}/revoke", headers=team.as_user("root"))
    assert refused.status_code == 422
    secret = token.split("_", 2)[2]
    assert secret not in refused.text and secret[:8] not in refused.text, refused.text
    assert stored(team) == before


# ---- offboarding: disabling a user, and who is an admin --------------------------------------------------------------

def test_an_admin_disables_a_user_whose_tokens_all_stop_working_and_whose_jobs_run_on(team: Team) -> None:
    job = team.launch("alice")
    second = team.client.post("/api/v1/users/alice/tokens", headers=team.as_user("alice")).json()

    response = team.client.post("/api/v1/users/alice/disable", headers=team.as_user("root"))

    assert response.status_code == 200, response.text
    assert response.json() == {"user": "alice", "revoked_tokens": [prefix_of(team.tokens["alice"]), second["prefix"]],
                               "live_jobs": 1, "already_disabled": False}
    for token in (team.tokens["alice"], second["token"]):
        refused = team.client.get("/api/v1/me", headers=bearer(token))
        assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == "Bearer"
    shown = team.client.get(f"/api/v1/jobs/{job}", headers=team.as_user("root")).json()
    assert shown["owner"] == "alice" and shown["job"]["state"] == "PENDING"
    listed = {u["name"]: u for u in team.client.get("/api/v1/users", headers=team.as_user("root")).json()}
    assert listed["alice"]["disabled_at"] is not None and listed["bob"]["disabled_at"] is None
    before = stored(team)
    made = team.client.post("/api/v1/users/alice/tokens", headers=team.as_user("root"))
    assert made.status_code == 409 and "user 'alice' is disabled" in made.json()["detail"]
    assert stored(team) == before


def test_an_enabled_user_gets_no_token_back_but_a_new_one_works(team: Team) -> None:
    team.client.post("/api/v1/users/alice/disable", headers=team.as_user("root"))
    enabled = team.client.post("/api/v1/users/alice/enable", headers=team.as_user("root"))
    assert enabled.status_code == 200 and enabled.json()["disabled_at"] is None
    assert team.client.get("/api/v1/me", headers=team.as_user("alice")).status_code == 401
    made = team.client.post("/api/v1/users/alice/tokens", headers=team.as_user("root"))
    assert made.status_code == 201
    assert team.client.get("/api/v1/me", headers=bearer(made.json()["token"])).json()["name"] == "alice"


def test_an_admin_makes_and_unmakes_admins(team: Team) -> None:
    made = team.client.patch("/api/v1/users/alice", json={"is_admin": True}, headers=team.as_user("root"))
    assert made.status_code == 200 and made.json()["is_admin"] is True
    assert team.client.get("/api/v1/users", headers=team.as_user("alice")).status_code == 200
    unmade = team.client.patch("/api/v1/users/alice", json={"is_admin": False}, headers=team.as_user("root"))
    assert unmade.status_code == 200 and unmade.json()["is_admin"] is False
    assert team.client.get("/api/v1/users", headers=team.as_user("alice")).status_code == 403


@pytest.mark.parametrize(("method", "path", "body", "detail"), [
    # over HTTP the last enabled admin is the caller: disabling them is disabling oneself
    ("POST", "/users/root/disable", None, "you cannot disable yourself (root)"),
    ("PATCH", "/users/root", {"is_admin": False}, "cannot demote root: they are the last enabled admin"),
])
def test_the_last_enabled_admin_is_neither_disabled_nor_demoted(team: Team, method: str, path: str, body, detail) -> None:
    team.client.patch("/api/v1/users/bob", json={"is_admin": True}, headers=team.as_user("root"))
    team.client.post("/api/v1/users/bob/disable", headers=team.as_user("root"))  # a disabled admin manages nothing
    before = stored(team)
    refused = team.client.request(method, f"/api/v1{path}", json=body, headers=team.as_user("root"))
    assert refused.status_code == 409 and detail in refused.json()["detail"]
    assert stored(team) == before


def test_an_admin_cannot_disable_themself_even_beside_another_admin(team: Team) -> None:
    team.client.patch("/api/v1/users/alice", json={"is_admin": True}, headers=team.as_user("root"))
    before = stored(team)
    refused = team.client.post("/api/v1/users/ROOT/disable", headers=team.as_user("root"))
    assert refused.status_code == 409 and "you cannot disable yourself" in refused.json()["detail"]
    assert stored(team) == before
    other = team.client.post("/api/v1/users/root/disable", headers=team.as_user("alice"))
    assert other.status_code == 200 and team.client.get("/api/v1/me", headers=team.as_user("root")).status_code == 401


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/users/{name}/disable", None), ("POST", "/users/{name}/enable", None),
    ("PATCH", "/users/{name}", {"is_admin": True}),
])
def test_offboarding_routes_are_admins_and_name_an_existing_user(team: Team, method: str, path: str, body) -> None:
    before = stored(team)
    for name, caller, code in (("bob", "alice", 403), ("zed", "alice", 403), ("zed", "root", 404)):
        response = team.client.request(method, "/api/v1" + path.format(name=name), json=body, headers=team.as_user(caller))
        assert response.status_code == code, (name, caller, response.text)
    assert team.client.request(method, "/api/v1" + path.format(name="bob"), json=body).status_code == 401
    assert stored(team) == before


def test_offboarding_changes_are_audited(team: Team) -> None:
    root = team.as_user("root")
    team.client.post("/api/v1/users/alice/disable", headers=root)
    team.client.post("/api/v1/users/alice/enable", headers=root)
    team.client.patch("/api/v1/users/bob", json={"is_admin": True}, headers=root)
    team.client.patch("/api/v1/users/bob", json={"is_admin": False}, headers=root)
    with team.store.session() as session:
        events = session.scalars(select(Event).where(Event.job_id.is_(None)).order_by(Event.id))
        audit = [(e.kind, e.message, e.data) for e in events]
    assert audit == [
        ("user_disabled", "user alice disabled by root",
         {"actor": "root", "user": "alice", "revoked_tokens": [prefix_of(team.tokens["alice"])]}),
        ("user_enabled", "user alice enabled by root", {"actor": "root", "user": "alice"}),
        ("admin_granted", "user bob made an admin by root", {"actor": "root", "user": "bob"}),
        ("admin_removed", "user bob made a non-admin by root", {"actor": "root", "user": "bob"}),
    ]
