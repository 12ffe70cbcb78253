"""ResumableSampler: the order depends only on (seed, epoch); a restored sampler continues mid-epoch."""

from __future__ import annotations

import itertools

import pytest

from spotrun import ResumableSampler


def test_epoch_order_depends_only_on_seed_and_epoch() -> None:
    first, second = ResumableSampler(50, seed=3), ResumableSampler(50, seed=3)
    list(first)  # consuming epochs changes nothing about an epoch's order
    assert first.epoch_order(4).tolist() == second.epoch_order(4).tolist()
    assert first.epoch_order(4).tolist() != first.epoch_order(5).tolist()
    assert ResumableSampler(50, seed=4).epoch_order(4).tolist() != first.epoch_order(4).tolist()
    assert sorted(first.epoch_order(0).tolist()) == list(range(50))


def test_restored_sampler_continues_with_the_next_unseen_batch() -> None:
    reference = list(itertools.islice(ResumableSampler(23, batch_size=5, seed=1).stream(), 12))
    sampler = ResumableSampler(23, batch_size=5, seed=1)
    head = list(itertools.islice(sampler.stream(), 7))  # epoch 0 has 5 batches: this stops mid epoch 1
    assert (sampler.epoch, sampler.position) == (1, 10)
    resumed = ResumableSampler(23, batch_size=5, seed=1)
    resumed.load_state_dict(sampler.state_dict())
    assert head + list(itertools.islice(resumed.stream(), 5)) == reference


def test_epoch_iteration_advances_epoch_only_at_its_end() -> None:
    sampler = ResumableSampler(10, batch_size=4, shuffle=False)
    assert len(sampler) == 3
    assert list(sampler) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert (sampler.epoch, sampler.position) == (1, 0)
    iterator = iter(sampler)
    next(iterator)
    assert (sampler.epoch, sampler.position) == (1, 4)


def test_ranks_split_each_epoch_evenly() -> None:
    shards = [ResumableSampler(11, seed=2, world_size=3, rank=rank) for rank in range(3)]
    orders = [shard.epoch_order(0).tolist() for shard in shards]
    assert all(len(order) == 4 == len(shard) for order, shard in zip(orders, shards))
    assert set(itertools.chain(*orders)) == set(range(11))


def test_drop_last_drops_the_short_batch() -> None:
    assert list(ResumableSampler(10, batch_size=4, shuffle=False, drop_last=True)) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_restoring_into_a_different_sampler_names_the_field() -> None:
    saved = ResumableSampler(100, seed=1).state_dict()
    with pytest.raises(ValueError, match="dataset_len=100"):
        ResumableSampler(99, seed=1).load_state_dict(saved)
    with pytest.raises(ValueError, match="seed"):
        ResumableSampler(100, seed=2).load_state_dict(saved)


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="dataset_len"):
        ResumableSampler(0)
    with pytest.raises(ValueError, match="batch_size"):
        ResumableSampler(5, batch_size=0)
    with pytest.raises(ValueError, match="rank"):
        ResumableSampler(5, world_size=2, rank=2)
