"""Counts and intervals a job file may set are bounded: 10**18 restarts or preemptions before fallback, 10**18
processes per node, a backup every millisecond, or an object store with no bucket, are refused naming the field.
Specs stored before these bounds are read back as they were (`JobSpec.stored`): their jobs must still be driven."""

from __future__ import annotations

import pytest

from spotrun.spec import JobSpec, SpecError, parse_spec

TORCHRUN = "resources: {nodes: 2}\ndistributed: {launcher: torchrun, procs_per_node: %s}\n"


def problem_of(text: str):
    with pytest.raises(SpecError) as caught:
        parse_spec(text, source="job.yaml")
    [problem] = caught.value.problems
    return problem


@pytest.mark.parametrize(
    ("written", "field", "message"),
    [
        ("max_restarts_on_error: 1000000000000000000\n", "max_restarts_on_error", "must be at most 10,000"),
        ("spot: {preemptions_before_fallback: 10001}\n", "spot.preemptions_before_fallback", "must be at most 10,000"),
        (TORCHRUN % 1025, "distributed.procs_per_node", "must be at most 1,024"),
        ("checkpoint: {sync_interval: 1ms}\n", "checkpoint.sync_interval", "must be at least 1s"),
        ("checkpoint: {sync_interval: 0.5}\n", "checkpoint.sync_interval", "must be at least 1s"),
        # 1e308 $/h had the fleet's totals on /metrics overflow to +Inf and NaN
        ("resources: {prices: {on_demand: 1.0e+308, spot: 1}}\n", "resources.prices.on_demand",
         "must be at most 1,000,000 $/h; got 1e+308"),
        ("resources: {prices: {on_demand: 1, spot: 1000001}}\n", "resources.prices.spot",
         "must be at most 1,000,000 $/h"),
        ("spot: {max_price: 1.0e+308}\n", "spot.max_price", "must be at most 1,000,000 $/h; got 1e+308"),
    ],
)
def test_a_value_past_its_bound_is_refused_naming_the_field(written, field, message):
    problem = problem_of("run: x\n" + written)
    assert problem.field == field
    assert message in problem.message


def test_the_bounds_themselves_are_accepted():
    spec = parse_spec(
        "run: x\nmax_restarts_on_error: 10000\nspot: {preemptions_before_fallback: 10000}\n"
        "checkpoint: {sync_interval: 1s}\n" + TORCHRUN % 1024
    )
    assert (spec.max_restarts_on_error, spec.spot.preemptions_before_fallback) == (10_000, 10_000)
    assert (spec.distributed.procs_per_node, spec.checkpoint.sync_interval) == (1024, 1.0)


def test_a_price_of_the_bound_is_accepted_and_the_simulator_shares_it():
    from spotrun.cli import simulate
    from spotrun.spec.fields import MAX_PRICE_PER_HOUR

    spec = parse_spec("run: x\nresources: {prices: {on_demand: 1000000, spot: 1000000}}\nspot: {max_price: 1000000}\n")
    assert (spec.resources.prices.on_demand, spec.resources.prices.spot, spec.spot.max_price) == (1e6,) * 3
    assert simulate.MAX_PRICE_PER_HOUR is MAX_PRICE_PER_HOUR


def test_a_spec_stored_before_the_bounds_is_read_back_as_stored():
    stored = {
        "run": "x", "max_restarts_on_error": 10**18,
        "spot": {"preemptions_before_fallback": 10**18, "max_price": 1e308},
        "resources": {"nodes": 2, "prices": {"on_demand": 1e308, "spot": 1e308}},
        "checkpoint": {"sync_interval": 0.2, "store": "s3://"},
        "distributed": {"launcher": "torchrun", "procs_per_node": 4096},
    }
    spec = JobSpec.stored(stored)
    assert (spec.max_restarts_on_error, spec.spot.preemptions_before_fallback) == (10**18, 10**18)
    assert (spec.checkpoint.sync_interval, spec.checkpoint.store) == (0.2, "s3://")
    assert spec.distributed.procs_per_node == 4096
    assert (spec.resources.prices.on_demand, spec.spot.max_price) == (1e308, 1e308)


@pytest.mark.parametrize(
    ("store", "names"),
    [("s3://", "bucket"), ("s3:///runs/1", "bucket"), ("gs://", "bucket"), ("gcs://", "bucket"),
     ("az://", "container"), ("abfs:///x", "container"), ("simplecache::s3://", "bucket")],
)
def test_an_object_store_without_a_bucket_is_refused_naming_the_field(store, names):
    problem = problem_of(f"run: x\ncheckpoint: {{store: '{store}'}}\n")
    assert (problem.field, problem.line) == ("checkpoint.store", 2)
    assert f"names no {names}" in problem.message and repr(store) in problem.message


@pytest.mark.parametrize(
    "store", ["s3://bucket", "s3://bucket/runs/1", "gs://b/x", "az://container/x", "file:///abs/ckpt", "memory://x",
              "/mnt/shared/ckpt", "ckpt"],
)
def test_a_store_that_names_its_bucket_or_is_not_an_object_store_is_accepted(store):
    assert parse_spec(f"run: x\ncheckpoint: {{store: '{store}'}}\n").checkpoint.store == store
