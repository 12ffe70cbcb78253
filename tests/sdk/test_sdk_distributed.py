"""Two gloo ranks: the stop flag is agreed (both stop at the step one rank was signalled), the checkpoint is
committed once with every rank's files, and each rank restores its own RNG state; ranks leaving through
exit_if_stopped; spread writes of the replicated state. Every scenario's ranks run in one run of sdk_two_ranks.py,
which imports torch once for all of them; each test checks its scenario's results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spotrun.sdk import layout, sharding

# the module's tests read one run of sdk_two_ranks.py: kept on one worker of `make test`, which runs it once
pytestmark = pytest.mark.xdist_group("sdk_two_ranks")

TWO_RANKS = Path(__file__).with_name("sdk_two_ranks.py")


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of one run of every two-rank scenario (sdk_two_ranks.py): <folder>/<scenario>, its ranks' results."""
    workdir = tmp_path_factory.mktemp("two_ranks")
    done = subprocess.run([sys.executable, str(TWO_RANKS), str(workdir)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir


def scenario(two_ranks: Path, name: str) -> Path:
    """The scenario's folder, once its ranks have run without an error."""
    failed = two_ranks / name / "failed.txt"
    if failed.exists():
        pytest.fail(f"a rank of scenario {name!r} failed:\n{failed.read_text()[-3000:]}")
    return two_ranks / name


def test_two_ranks_stop_together_and_commit_once(two_ranks: Path) -> None:
    folder = scenario(two_ranks, "stop")
    results = [json.loads((folder / f"result-{rank}.json").read_text()) for rank in range(2)]
    for rank, result in enumerate(results):
        assert result["stopped_at"] == 6, f"rank {rank} stopped at {result['stopped_at']}"
        assert result["restored"] == 7, f"rank {rank}"
        assert result["rng_restored"] and result["weights_restored"] and result["sampler_restored"], f"rank {rank}"

    import fsspec

    fs = fsspec.filesystem("file")
    committed = layout.list_committed(fs, str(folder / "ckpt"))
    assert [steps for steps, _ in committed] == [4, 7]  # the periodic save at 4, the stop save at 7
    manifest = layout.read_manifest(fs, committed[-1][1])
    assert manifest is not None and manifest["world_size"] == 2
    assert sorted(manifest["files"]) == ["rank-00000.pt", "rank-00001.pt", "shared.pt"]
    layout.read_verified(fs, committed[-1][1])


def test_ranks_leaving_through_exit_if_stopped_destroy_the_sdks_groups_and_keep_the_users(two_ranks: Path) -> None:
    # gloo groups left to the interpreter's exit aborted a rank that had saved (SIGABRT), now and then
    folder = scenario(two_ranks, "exit")
    for rank in range(2):
        result = json.loads((folder / f"exit-{rank}.json").read_text())
        assert result["code"] == 75 and result["code_again"] == 75, result
        assert result["destroyed"] == ["other", "other"], result  # the SDK's step and save groups, not the default
        assert result["default_sum"] == 2.0 and result["steps"] == 4.0, result


def test_ranks_share_the_writing_of_the_replicated_state_and_it_comes_back_as_rank_0s(two_ranks: Path) -> None:
    folder = scenario(two_ranks, "spread")
    for rank in range(2):
        result = json.loads((folder / f"result-{rank}.json").read_text())
        assert result["restored"] == 3 and result["model"] and result["moments"], (rank, result)
        assert result["same"] and result["per_rank"], (rank, result)  # the user's values: rank 0's, on both
    assert json.loads((folder / "result-1.json").read_text())["buffers_differed"]  # BatchNorm's, between broadcasts

    from spotrun.sdk.storage import open_store

    store = open_store(folder / "ckpt")
    [(_, path)] = store.committed()
    manifest = layout.read_manifest(store.fs, path)
    assert manifest is not None and {"shards-00001.pt", "replicas-00000.pt", "shards.idx"} <= manifest["files"].keys()
    index = store.load_verified(path, ["shards.idx"])["shards.idx"]
    by_rank_1 = [key for key, pieces in index.items() if pieces[0][0] == "shards-00001.pt"]
    assert by_rank_1 and all(pieces[0][1] == (0,) * len(pieces[0][2]) for pieces in index.values())  # whole tensors
    # rank 1's own number differs from rank 0's: rank 0 wrote that tensor itself
    assert index[("extra", "per_rank")] == [("replicas-00000.pt", (0,), (450000,))]


def test_tensors_sharing_a_storage_are_spread_to_one_file_and_come_back_sharing_it(two_ranks: Path) -> None:
    """A view under the size that is spread stayed in rank 0's file while its base went to rank 1's, and a base rank 1
    held other values of went to rank 0's fallback file while its view stayed in rank 1's: loaded, each pair was two
    tensors, which a model rebuilt from the checkpoint trains apart."""
    folder = scenario(two_ranks, "spread_tied")
    results = [json.loads((folder / f"result-{rank}.json").read_text()) for rank in range(2)]
    all_tied = {"model": True, "base": True, "diverging": True}
    assert results[0]["loaded_ties"] == all_tied and results[0]["loaded_rank_0s"], results[0]
    for rank, result in enumerate(results):
        assert result["restored"] == 1 and result["restored_ties"] == all_tied, (rank, result)
        assert result["restored_rank_0s"] and result["model_still_tied"], (rank, result)

    from spotrun.sdk.storage import open_store

    store = open_store(folder / "ckpt")
    [(_, path)] = store.committed()
    index = store.load_verified(path, ["shards.idx"])["shards.idx"]
    files = {sharding.dotted(path): pieces[0][0] for path, pieces in index.items()}
    assert files == {  # each pair dealt to rank 1 as one; the diverging one written by rank 0 as one
        "model.embed.weight": "shards-00001.pt", "model.head.weight": "shards-00001.pt",
        "values.base": "shards-00001.pt", "values.view": "shards-00001.pt",
        "values.diverging": "replicas-00000.pt", "values.diverging_view": "replicas-00000.pt",
    }
