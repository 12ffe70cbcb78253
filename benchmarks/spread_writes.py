"""``spread_writes`` measured with several processes: N gloo ranks on CPU hold the same replicated state and save it
to S3 (a moto_server on 127.0.0.1), with the replicated tensors dealt out among the ranks to write (on) or all
written by rank 0 (off), alternated in the same processes.

    .venv/bin/python benchmarks/spread_writes.py [--world-sizes 1 2 4] [--sizes-mib 64 256] [--tensors 8]
        [--repeats 3] [--per-rank-mbps 0] [--moto-disk] [--json PATH] [--quick]

The state is ``--tensors`` float32 tensors of equal size, ``--sizes-mib`` in all, the same on every rank. Each rank
keeps one Checkpointer per size and variant for the whole run, as a training run does: one save to warm it up (its
host copy allocated), then ``--repeats`` measured saves, the variants' order flipped every repeat. Per save, on
every rank after a barrier: the training thread's stall (``save(wait=False)``: the host snapshot), the time until
its writer thread had written the rank's files, and then hashed the replicated tensors (rank 0: its copies of the
other ranks' share), the time until the save is committed (``wait``), and the peak memory above the RSS before the
save (VmHWM reset through /proc/self/clear_refs). Stall and commit are the slowest rank's (the job waits for it).
With one rank, on and off run the same code: their difference is the run's noise.

Checks: after the warm-up save and the last measured one of each size and variant, every rank restores the checkpoint
into its zeroed tensors (a second Checkpointer, straight to moto) and compares their SHA-256 with the state's (a
restore on every rank after every save took most of the run's time); after every save rank 0 lists the checkpoint's
files, so that the bytes each rank wrote are known and a ``replicas-00000.pt`` (rank 0 writing a tensor another rank
was to write, as its hash differed) is seen. A restore that differs fails the run.

``--per-rank-mbps`` puts each rank behind a proxy of its own that holds all its connections together to that many MB/s
each way: one node's network. Without it, everything is one machine's loopback, moto and this machine's cores the
limit. (``local_s3``'s cap per connection is not offered here: it counts from a connection's start, so a connection
that s3fs keeps open between saves, as these long-lived Checkpointers' do, would save up credit while idle and send
its next parts uncapped.) moto keeps objects
in its memory (``--moto-disk``: in files on this disk, its default). ``--quick``: world sizes 1 and 2, 8 MiB in 4
tensors, one repeat (the smoke test's run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import local_s3  # benchmarks/local_s3.py, beside this script
import spotrun
from spotrun.sdk import layout, replicas

BUCKET = "spotrun-bench"
VARIANTS = ("off", "on")
MIB = 2**20


def proc_status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise KeyError(field)


def replicated_state(size_mib: int, tensors: int) -> nn.ParameterList:
    """``tensors`` float32 tensors, ``size_mib`` in all, the same on every rank (one seed)."""
    generator = torch.Generator().manual_seed(size_mib)
    numel = size_mib * MIB // 4 // tensors
    return nn.ParameterList([nn.Parameter(torch.randn(numel, generator=generator)) for _ in range(tensors)])


def writer_of(name: str) -> int:
    """The rank that writes a checkpoint's file: ``rank-<r>.pt`` and ``shards-<r>.pt`` rank r's, the rest rank 0's."""
    stem = name.removesuffix(".pt")
    if stem.startswith(("rank-", "shards-")) and stem.rsplit("-", 1)[1].isdigit():
        return int(stem.rsplit("-", 1)[1])
    return 0


class TimedCheckpointer(spotrun.Checkpointer):
    """A Checkpointer that notes when its writer thread had written this rank's files, and how long it then took
    to hash the replicated tensors (rank 0: its copies of those the other ranks wrote), both ``perf_counter`` times."""

    marks: dict[str, float]

    def _write_own_files(self, snapshot):  # type: ignore[no-untyped-def]
        written = super()._write_own_files(snapshot)
        self.marks["written"] = time.perf_counter()
        return written

    def _digests(self, snapshot):  # type: ignore[no-untyped-def]
        digests = super()._digests(snapshot)
        self.marks["hashed"] = time.perf_counter()
        return digests


def one_save(ckpt: TimedCheckpointer, state: spotrun.TrainingState, step: int) -> dict[str, float]:
    dist.barrier()
    Path("/proc/self/clear_refs").write_text("5")
    baseline = proc_status_kib("VmRSS")
    ckpt.marks = {}
    started = time.perf_counter()
    ckpt.save(state, step, wait=False)
    stall = time.perf_counter() - started
    ckpt.wait()
    commit = time.perf_counter() - started
    return {"stall": stall, "commit": commit, "written": ckpt.marks["written"] - started,
            "hashing": ckpt.marks["hashed"] - ckpt.marks["written"],
            "peak_extra_mib": (proc_status_kib("VmHWM") - baseline) / 1024}


def check(checker: spotrun.Checkpointer, fresh: nn.ParameterList, expected: str, steps: int, world: int,
          restore: bool) -> dict:
    """With ``restore``, restore into zeroed tensors and compare; rank 0 lists the checkpoint's files (the bytes each
    rank wrote) every time."""
    result: dict = {}
    if restore:
        with torch.no_grad():
            for tensor in fresh:
                tensor.zero_()
        restored = checker.restore(spotrun.torch_state(model=fresh, rng=False))
        result |= {"restored_steps": restored, "equal": spotrun.weights_sha256(fresh) == expected}
    if dist.get_rank() == 0:
        folder = checker.store.path(steps)
        written = [0] * world
        names = []
        for entry in checker.fs.ls(folder, detail=True, refresh=True):
            name = entry["name"].rsplit("/", 1)[1]
            names.append(name)
            if name != layout.MANIFEST_NAME:
                written[writer_of(name)] += entry["size"]
        result |= {"written_mb": [count / 1e6 for count in written], "fallback": replicas.FALLBACK_FILE in names,
                   "files": sorted(names)}
    return result


def rank_main(rank: int, world: int, options: dict, out: str) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=world)
    save_options = local_s3.storage_options(f"http://127.0.0.1:{options['save_ports'][rank]}")
    check_options = local_s3.storage_options(f"http://127.0.0.1:{options['moto_port']}")
    sizes, repeats = options["sizes_mib"], options["repeats"]
    models = {size: replicated_state(size, options["tensors"]) for size in sizes}
    states = {size: spotrun.torch_state(model=model, rng=False) for size, model in models.items()}
    expected = {size: spotrun.weights_sha256(model) for size, model in models.items()}
    fresh = {size: replicated_state(size, options["tensors"]) for size in sizes}
    ckpts, checkers = {}, {}
    for size in sizes:  # every rank creates its Checkpointers in the same order
        for variant in VARIANTS:
            location = f"s3://{BUCKET}/{options['run']}/world{world}-{size}mib-{variant}"
            ckpts[size, variant] = TimedCheckpointer(location, storage_options=save_options, signals=(),
                                                        keep_last=1, spread_writes=variant == "on")
            checkers[size, variant] = spotrun.Checkpointer(location, storage_options=check_options, signals=())
    results: list[dict] = []
    for repeat in range(-1, repeats):  # -1: the warm-up save, not counted
        for size in sizes:
            for variant in VARIANTS if repeat % 2 == 0 else VARIANTS[::-1]:
                measured = one_save(ckpts[size, variant], states[size], repeat + 1)
                checked = check(checkers[size, variant], fresh[size], expected[size], repeat + 2, world,
                                restore=repeat in (-1, repeats - 1))
                results.append({"world": world, "repeat": repeat, "size_mib": size, "variant": variant, "rank": rank,
                                **measured, **checked})
    for ckpt in (*ckpts.values(), *checkers.values()):
        ckpt.close()
    Path(out, f"rank-{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


def run_world(world: int, options: dict) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix=f"spotrun-spread-{world}-") as out:
        mp.spawn(rank_main, args=(world, options, out), nprocs=world, join=True)
        return [row for rank in range(world) for row in json.loads(Path(out, f"rank-{rank}.json").read_text())]


def summarize(world: int, rows: list[dict]) -> list[dict]:
    """Per size and variant: each save's slowest rank, then the medians (and min-max) over the repeats."""
    summary = []
    for size in dict.fromkeys(row["size_mib"] for row in rows):
        for variant in VARIANTS:
            mine = [row for row in rows if row["size_mib"] == size and row["variant"] == variant and row["repeat"] >= 0]
            saves = {}
            for row in mine:
                saves.setdefault(row["repeat"], []).append(row)
            per_save = [{
                "stall": max(r["stall"] for r in ranks), "commit": max(r["commit"] for r in ranks),
                "written_rank0": next(r["written"] for r in ranks if r["rank"] == 0),
                "written_others": max((r["written"] for r in ranks if r["rank"]), default=0.0),
                "hashing_rank0": next(r["hashing"] for r in ranks if r["rank"] == 0),
                "peak_rank0": next(r["peak_extra_mib"] for r in ranks if r["rank"] == 0),
                "peak_others": max((r["peak_extra_mib"] for r in ranks if r["rank"]), default=0.0),
                "rank0_mb": next(r["written_mb"][0] for r in ranks if r["rank"] == 0),
                "others_mb": max(next(r["written_mb"] for r in ranks if r["rank"] == 0)[1:], default=0.0),
            } for ranks in saves.values()]
            every = [row for row in rows if row["size_mib"] == size and row["variant"] == variant]
            summary.append({
                "world": world, "size_mib": size, "variant": variant, "saves": len(per_save),
                **{key: statistics.median(save[key] for save in per_save) for key in per_save[0]},
                **{f"{key}_range": [min(s[key] for s in per_save), max(s[key] for s in per_save)]
                   for key in ("stall", "commit")},
                "restores": sum("equal" in row for row in every),  # one a rank
                "restores_equal": sum(row.get("equal", False) and row["restored_steps"] == row["repeat"] + 2
                                      for row in every),
                "fallbacks": sum(row.get("fallback", False) for row in every),
            })
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--tensors", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--per-rank-mbps", type=float, default=0.0,
                        help="MB/s each way for all of one rank's connections together (its own proxy); 0: no cap")
    parser.add_argument("--moto-disk", action="store_true",
                        help="moto keeps objects in files on this disk (its default), not in its memory")
    parser.add_argument("--json", type=Path, help="write the per-save rows and the summary here")
    parser.add_argument("--quick", action="store_true", help="world sizes 1 2, 8 MiB in 4 tensors, one repeat")
    args = parser.parse_args()
    if args.quick:
        args.world_sizes, args.sizes_mib, args.tensors, args.repeats = [1, 2], [8], 4, 1
    if any(size * MIB // args.tensors < replicas.SPREAD_MIN_BYTES for size in args.sizes_mib):
        parser.error(f"each tensor must hold {replicas.SPREAD_MIN_BYTES} bytes or more to be spread")
    started = time.perf_counter()
    with local_s3.moto_s3(BUCKET, in_memory=not args.moto_disk) as moto_port, contextlib.ExitStack() as stack:
        most = max(args.world_sizes)
        if args.per_rank_mbps:
            save_ports = [stack.enter_context(local_s3.capped_proxy(moto_port, args.per_rank_mbps * 1e6, shared=True))
                          for _ in range(most)]
        else:
            save_ports = [moto_port] * most
        options = {"moto_port": moto_port, "save_ports": save_ports, "sizes_mib": args.sizes_mib,
                   "tensors": args.tensors, "repeats": args.repeats, "run": uuid.uuid4().hex}
        rows, summary = [], []
        for world in args.world_sizes:
            world_rows = run_world(world, options)
            rows += world_rows
            summary += summarize(world, world_rows)
    where = "on disk" if args.moto_disk else "in memory"
    cap = f"each rank capped to {args.per_rank_mbps:g} MB/s in all" if args.per_rank_mbps else "no cap"
    print(f"{args.tensors} float32 tensors, replicated; moto_server on 127.0.0.1 (objects {where}), {cap}; "
          f"medians of {args.repeats} (after a warm-up save), the slowest rank's seconds; "
          f"{time.perf_counter() - started:.0f} s in all")
    header = ["world", "MiB", "spread", "stall", "stall min-max", "commit", "commit min-max", "r0 written",
              "others written", "r0 hashing", "rank 0 MB", "other MB", "peak r0 MiB", "peak others MiB",
              "rank restores equal", "fallbacks"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in summary:
        print("| " + " | ".join([
            str(row["world"]), str(row["size_mib"]), row["variant"], f"{row['stall']:.3f}",
            "{:.3f}-{:.3f}".format(*row["stall_range"]), f"{row['commit']:.2f}",
            "{:.2f}-{:.2f}".format(*row["commit_range"]),
            f"{row['written_rank0']:.2f}", f"{row['written_others']:.2f}", f"{row['hashing_rank0']:.3f}",
            f"{row['rank0_mb']:.1f}", f"{row['others_mb']:.1f}",
            f"{row['peak_rank0']:.0f}", f"{row['peak_others']:.0f}",
            f"{row['restores_equal']}/{row['restores']}", str(row["fallbacks"]),
        ]) + " |")
    print("on/off ratios of the medians (commit, stall):")
    for world in args.world_sizes:
        for size in args.sizes_mib:
            off, on = (next(r for r in summary if (r["world"], r["size_mib"], r["variant"]) == (world, size, variant))
                       for variant in VARIANTS)
            print(f"  world {world}, {size} MiB: commit {on['commit'] / off['commit']:.2f}x, "
                  f"stall {on['stall'] / off['stall']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    if any(row["restores_equal"] != row["restores"] for row in summary):
        sys.exit("a restored checkpoint differed from the state saved")


if __name__ == "__main__":
    main()
