"""The AWS IMDSv2 source against the fake IMDS: spot instance-action, session tokens, rebalance warnings."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from fakes.fake_imds import INSTANCE_ACTION_PATH, REBALANCE_PATH, imds_time

from spotrun.agent.cloud_notices import AwsSpotNotice, EarlyWarning
from spotrun.agent.notices import Notice

from .cloud_polling import refused_url, wait_until


@pytest.fixture
def aws_source() -> Iterator[Callable[..., AwsSpotNotice]]:
    sources: list[AwsSpotNotice] = []

    def make(url: str, **options: object) -> AwsSpotNotice:
        sources.append(AwsSpotNotice(url, **options))  # type: ignore[arg-type]
        return sources[-1]

    yield make
    for source in sources:
        source.close()


def test_no_instance_action_is_no_notice(imds, aws_source):
    source = aws_source(imds.url)
    assert source.poll() is None
    assert imds.request_count(INSTANCE_ACTION_PATH, "GET") == 1
    assert imds.request_count(REBALANCE_PATH, "GET") == 1


@pytest.mark.parametrize("action", ["terminate", "stop", "hibernate"])
def test_instance_action_is_a_notice_with_its_time_as_deadline(imds, aws_source, action):
    source = aws_source(imds.url)
    reclaim_at = imds.announce_interruption(action, reclaim_after=120)
    notice = source.poll()
    assert notice is not None
    assert (notice.source, notice.deadline) == ("aws-imds", reclaim_at)
    assert action in notice.detail
    assert reclaim_at - 121 < time.time() < reclaim_at


def test_an_interruption_announced_for_later_is_no_notice_until_then(imds, aws_source):
    source = aws_source(imds.url)
    announced_at = time.time() + 1.0
    imds.announce_interruption(at=announced_at)
    assert source.poll() is None
    assert isinstance(wait_until(source.poll, timeout=3.0), Notice)
    assert time.time() >= announced_at


def test_an_unknown_action_is_unknown_not_a_notice(imds, aws_source):
    imds.announce_interruption("reboot")
    assert aws_source(imds.url).poll() is None


def test_one_session_token_serves_many_polls(imds, aws_source):
    source = aws_source(imds.url)
    for _ in range(3):
        assert source.poll() is None
    assert imds.tokens_issued == 1
    assert imds.unauthorized_answers == 0


def test_token_is_renewed_before_it_expires(imds, aws_source):
    now = [1000.0]
    source = aws_source(imds.url, token_ttl=100, clock=lambda: now[0])
    source.poll()
    now[0] += 89
    source.poll()
    assert imds.tokens_issued == 1
    now[0] += 2  # past 90% of the token's life
    source.poll()
    assert imds.tokens_issued == 2
    assert imds.unauthorized_answers == 0


def test_a_401_fetches_a_new_token_and_the_probe_still_answers(imds, aws_source):
    source = aws_source(imds.url)
    assert source.poll() is None
    imds.expire_tokens()
    reclaim_at = imds.announce_interruption()
    notice = source.poll()
    assert notice is not None and notice.deadline == reclaim_at
    assert imds.tokens_issued == 2
    assert imds.unauthorized_answers == 1


@pytest.mark.parametrize("breakage", ["fail_with_status", "drop_connections", "answer_garbage"])
def test_a_broken_service_is_unknown_never_a_notice(imds, aws_source, breakage):
    source = aws_source(imds.url)
    reclaim_at = imds.announce_interruption()
    getattr(imds, breakage)()
    assert source.poll() is None
    assert source.poll() is None
    imds.repair()
    notice = source.poll()
    assert notice is not None and notice.deadline == reclaim_at


def test_a_token_refused_is_unknown(imds, aws_source):
    imds.announce_interruption()
    imds.fail_with_status(403)
    assert aws_source(imds.url).poll() is None


def test_connection_refused_is_unknown(aws_source):
    assert aws_source(refused_url()).poll() is None


def test_rebalance_recommendation_is_an_early_warning_not_a_preemption(imds, aws_source):
    warnings: list[EarlyWarning] = []
    source = aws_source(imds.url, on_early_warning=warnings.append)
    notice_time = imds.recommend_rebalance()
    for _ in range(3):
        assert source.poll() is None
    detail = f"EC2 rebalance recommendation (noticeTime {imds_time(notice_time)})"
    assert warnings == [EarlyWarning("aws-imds", detail, notice_time, "rebalance")]
    assert imds.request_count(REBALANCE_PATH) == 1  # once seen, it is not asked again
    reclaim_at = imds.announce_interruption()
    notice = source.poll()
    assert notice is not None and notice.deadline == reclaim_at


def test_an_instance_action_beside_a_rebalance_recommendation_is_a_notice(imds, aws_source):
    source = aws_source(imds.url)
    imds.recommend_rebalance()
    imds.announce_interruption()
    assert source.poll() is not None
