"""How spread writes deal the shared state's large tensors out among the ranks (`replicas.plan`)."""

from __future__ import annotations

import torch

from spotrun.sdk import replicas

MB = 1 << 20


def floats(megabytes: float) -> torch.Tensor:
    return torch.zeros(int(megabytes * MB) // 4)


def bytes_per_rank(structure: dict, assignment: dict, world_size: int) -> list[int]:
    """What each rank's file holds of the spread tensors, each storage once."""
    held = [0] * world_size
    seen: set[int] = set()
    for key, tensor in structure.items():
        storage = tensor.untyped_storage()
        if (key,) in assignment and storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            held[assignment[(key,)]] += storage.nbytes()
    return held


def test_a_tied_weight_counts_once_in_its_ranks_load():
    """The tied pair (4 MB, one storage) was counted 8 MB: rank 0 got it alone, rank 1 the 6 MB and 3 MB tensors,
    9 MB against 4 MB. Counted once: 6 MB against 7 MB."""
    embedding = floats(4)
    structure = {"embed": embedding, "head": embedding.view(-1), "big": floats(6), "medium": floats(3)}
    assignment = replicas.plan(structure, world_size=2)
    assert assignment[("embed",)] == assignment[("head",)]  # a storage goes whole to one rank
    assert sorted(bytes_per_rank(structure, assignment, 2)) == [6 * MB, 7 * MB]


def test_views_of_one_storage_weigh_the_span_they_cover():
    base = floats(8)
    halves = base.view(2, -1)
    structure = {"first": halves[0], "second": halves[1], "other": floats(5)}
    group = [(("first",), halves[0]), (("second",), halves[1])]
    assert replicas.written_bytes(group) == 8 * MB
    assert replicas.written_bytes([(("first",), halves[0])]) == 4 * MB
    assignment = replicas.plan(structure, world_size=2)
    assert assignment[("first",)] == assignment[("second",)] != assignment[("other",)]


def test_small_tensors_stay_with_rank_0_and_large_ones_go_largest_first_to_the_least_loaded():
    structure = {"a": floats(5), "b": floats(4), "c": floats(3), "d": floats(2), "small": floats(0.5)}
    assignment = replicas.plan(structure, world_size=2)
    assert ("small",) not in assignment
    assert assignment == {("a",): 0, ("b",): 1, ("c",): 1, ("d",): 0}
