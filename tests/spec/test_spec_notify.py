"""`notify:` of the job file: an http(s) webhook, the names of the happenings to tell, and the URL never shown whole."""

from textwrap import dedent

import pytest

from spotrun.spec import JobSpec, Problem, SpecError, parse_spec
from spotrun.spec.notify import DEFAULT_NOTIFY_EVENTS, webhook_origin

SECRET = "T0001/B0002/XXXXsecretXXXX"


def job(notify: str) -> str:
    return dedent("""\
        name: n
        run: train
        notify:
        """) + notify


def problems_of(text: str) -> list[Problem]:
    with pytest.raises(SpecError) as caught:
        parse_spec(text, source="job.yaml")
    return caught.value.problems


def test_a_webhook_alone_tells_the_default_happenings() -> None:
    spec = parse_spec(job(f"  webhook: https://hooks.slack.com/services/{SECRET}\n"))
    assert spec.notify.webhook == f"https://hooks.slack.com/services/{SECRET}"
    assert spec.notify.events == list(DEFAULT_NOTIFY_EVENTS) == [
        "succeeded", "failed", "cancelled", "preempted", "fell_back"]


def test_no_notify_is_no_notification() -> None:
    assert parse_spec("run: train").notify is None


def test_chosen_events_are_kept_and_survive_the_store() -> None:
    spec = parse_spec(job("  webhook: http://127.0.0.1:8080/hook\n  events: [failed, back_to_spot]\n"))
    assert spec.notify.events == ["failed", "back_to_spot"]
    assert JobSpec.stored(spec.to_json()) == spec


@pytest.mark.parametrize(("url", "says"), [
    (f"ftp://hooks.example.com/{SECRET}", "must be an http:// or https:// URL"),
    (f"hooks.example.com/{SECRET}", "must be an http:// or https:// URL"),
    (f"file:///tmp/{SECRET}", "must be an http:// or https:// URL"),
    (f"https:///{SECRET}", "must name a host after https://"),
    (f"https://hooks.example.com/{SECRET} trailing", "without spaces"),
    (f"https://hooks.example.com:99999/{SECRET}", "port from 0 to 65535"),
])
def test_a_webhook_not_an_http_url_is_refused_without_echoing_it(url: str, says: str) -> None:
    [problem] = problems_of(job(f"  webhook: '{url}'\n"))
    assert problem.field == "notify.webhook" and problem.line == 4
    assert says in problem.message and SECRET not in problem.message


def test_an_unknown_event_name_is_refused_naming_the_known_ones() -> None:
    [problem] = problems_of(job("  webhook: https://h.example.com/x\n  events: [failed, finished]\n"))
    assert problem.field == "notify.events[1]"
    assert "'finished'" in problem.message and "'succeeded'" in problem.message and "'fell_back'" in problem.message


@pytest.mark.parametrize(("events", "says"), [
    ("[]", "must not be empty"), ("[failed, failed]", "'failed' is listed twice"),
])
def test_an_empty_or_repeated_event_list_is_refused(events: str, says: str) -> None:
    [problem] = problems_of(job(f"  webhook: https://h.example.com/x\n  events: {events}\n"))
    assert problem.field == "notify.events" and says in problem.message


def test_a_webhook_is_required_and_unknown_keys_refused() -> None:
    problems = problems_of(job("  url: https://h.example.com/x\n"))
    assert {(p.field, p.message) for p in problems} == {
        ("notify.webhook", "field required"), ("notify.url", "unknown field 'url'")}


@pytest.mark.parametrize(("url", "shown"), [
    (f"https://hooks.slack.com/services/{SECRET}", "https://hooks.slack.com"),
    (f"http://user:pass@127.0.0.1:8080/{SECRET}?token=x#f", "http://127.0.0.1:8080"),
    (f"https://[::1]:9000/{SECRET}", "https://[::1]:9000"),
])
def test_the_webhook_is_shown_as_its_scheme_and_host_only(url: str, shown: str) -> None:
    assert webhook_origin(url) == shown


def test_the_spec_repr_leaves_the_webhook_out() -> None:
    spec = parse_spec(job(f"  webhook: https://hooks.slack.com/services/{SECRET}\n"))
    assert SECRET not in repr(spec) and SECRET not in str(spec.notify)
