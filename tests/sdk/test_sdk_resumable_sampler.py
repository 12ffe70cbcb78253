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


def ranks(world: int, **settings: object) -> list[ResumableSampler]:
    return [ResumableSampler(30, batch_size=2, seed=4, world_size=world, rank=rank, **settings) for rank in range(world)]


def take(samplers: list[ResumableSampler], batches: int) -> list[int]:
    """``batches`` batches from each rank, in lockstep (as ranks training together take them)."""
    streams = [sampler.stream() for sampler in samplers]
    return [index for _ in range(batches) for stream in streams for index in next(stream)]


def test_another_number_of_ranks_takes_over_the_rest_of_the_epoch_each_sample_once() -> None:
    two = ranks(2)
    seen = take(two, 3)  # each rank 3 batches of 2: the first 12 of the epoch's order of 30
    order = ResumableSampler(30, seed=4).epoch_order(0).tolist()
    assert sorted(seen) == sorted(order[:12])
    three = ranks(3)
    for sampler in three:  # rank 0's state is everyone's (the sampler is shared state)
        sampler.load_state_dict(two[0].state_dict())
    assert [len(sampler) for sampler in three] == [3, 3, 3]  # 18 left: 6 each, in batches of 2
    rest = take(three, 3)
    assert sorted(rest) == sorted(order[12:])  # every sample of the epoch once
    following = ranks(3)
    for sampler in following:
        sampler.epoch = 1
    assert take(three, 2) == take(following, 2)  # the next epoch is shared out as usual


def test_a_taken_over_epoch_saved_again_resumes_on_any_number_of_ranks() -> None:
    two = ranks(2)
    seen = take(two, 2)  # 8 of 30
    three = ranks(3)
    for sampler in three:
        sampler.load_state_dict(two[0].state_dict())
    seen += take(three, 1)  # 6 more: 14
    saved = three[0].state_dict()
    assert (saved["epoch"], saved["position"], saved["start"]) == (0, 2, 8)
    same = ranks(3)
    for sampler in same:
        sampler.load_state_dict(saved)
    assert take(same, 2) == take(three, 2)  # the same number of ranks goes on exactly
    [one] = ranks(1)
    one.load_state_dict(saved)
    rest = take([one], len(one))
    assert len(rest) == 16 and sorted(seen + rest) == list(range(30))


def test_an_epoch_the_other_ranks_finished_is_not_taken_over() -> None:
    two = ranks(2, drop_last=True)
    take(two, 7)  # 7 batches of 2 each: 28 of 30; the 2 dropped are no one's to take
    state = two[0].state_dict()
    assert (state["epoch"], state["position"]) == (0, 14)
    [one] = ranks(1, drop_last=True)
    one.load_state_dict(state)
    assert (one.epoch, one.position, one.start_of(0)) == (1, 0, 0)
