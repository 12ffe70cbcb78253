"""Checkpoint save/restore benchmark: synchronous torch.save, torch.distributed.checkpoint.async_save and
spotrun's Checkpointer, side by side in one run, against the disk's raw sequential write/read speed.

    python benchmarks/checkpoint.py --size-gib 1 --repeats 3 --dir /tmp/ckpt-bench

The training state is a stack of Linear layers plus its Adam state (two moments per parameter), i.e. about
3 x 4 bytes per parameter. For every repeat each method (in a rotating order, so drifts of a noisy machine
spread evenly) saves the state and restores it; the script prints medians and ratios and writes all samples
as JSON (``--json``, default ``<dir>/checkpoint-benchmark.json``).

What is measured
- blocked: how long the training loop cannot run per save (the call until it returns).
- durable: from the start of the save until the checkpoint is fsynced and committed (torch.save: file
  written, flushed, fsynced, renamed into place, folder fsynced; DCP: its future resolved, i.e. files
  written and fsynced and ``.metadata`` written; spotrun: ``wait()`` returned, i.e. manifest committed).
- restore: from nothing in memory to the state loaded into the model and optimizer, with the checkpoint's
  files dropped from the page cache first (fsync + posix_fadvise(DONTNEED)), as for the raw read.
  Some VMs hand memory the guest frees back to their host within seconds (virtio-balloon free page reporting;
  the development VM does), and faulting it in again then runs at the host's pace (``benchmarks/host_memory.py``
  measures it: 1.4-1.5 GB/s there 3-5 s after a free, against 17 GB/s right after). A restore allocates its tensors and the raw read does not (its
  buffer is faulted in beforehand), so the restore above depends on how much memory the host took back just
  then. After the repeats, each method saves once more and restores ``--repeats`` times right after twice the
  state's size of memory was faulted in and freed ("warm": memory the host still backs, as on a VM whose host
  does not take memory back; like for like with the raw read). This phase runs last so that its memory
  traffic does not change the figures above.
- raw disk: a file of the state's size written in 64 MiB chunks and fsynced, three times: plainly, with the
  disk writes of each chunk started at once (Linux sync_file_range, as spotrun's writer does through the page
  cache), and with O_DIRECT from one page-aligned buffer (as spotrun's writer does where the filesystem takes
  it); the fastest of the three is the raw write figure. Then dropped from the page cache the same way and
  read back in 64 MiB chunks into a preallocated buffer, twice: through the page cache, and with O_DIRECT
  (straight from the disk into the buffer, as spotrun's restore reads large tensors); the faster of the two
  is the raw read figure. Where O_DIRECT is refused, only the other figures count.
- peak extra host memory: the process's RSS high-water mark (VmHWM, reset before each save by writing 5 to
  /proc/self/clear_refs) minus its RSS just before the save, taken when the save is durable; the largest
  over the repeats is reported. It counts every thread's allocations and no page cache. Memory a method
  keeps between saves (spotrun's reused host snapshot) is in the RSS before the save, so its first save is
  the one that shows it.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import json
import math
import mmap
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import spotrun
from spotrun.sdk import hostmem

CHUNK = 64 << 20
GIB = 1 << 30
MIB = 1 << 20
TARGET_BLOCKED_RATIO = 0.10
TARGET_THROUGHPUT_RATIO = 0.70
TARGET_PEAK_MEMORY_RATIO = 1.2


# -- the state --------------------------------------------------------------------------------------------


@dataclass
class Training:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer

    @property
    def state_bytes(self) -> int:
        tensors = list(self.model.state_dict().values())
        tensors += [value for per_param in self.optimizer.state.values() for value in per_param.values()]
        return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))

    def fingerprint(self) -> str:
        return spotrun.weights_sha256(self.model)


def build_training(size_bytes: int, seed: int = 0) -> Training:
    """Linear layers whose weights plus Adam moments make about ``size_bytes``; each weight is at least 64 MiB
    at full size, above glibc's largest mmap threshold, so freed tensors go back to the OS and RSS readings
    of one measurement are not flattered by memory an earlier one left in the heap."""
    params = size_bytes // 12
    width = 4096 if params >= 2 * 4096 * 4096 else max(64, int(math.sqrt(params / 2)))
    layers = max(1, round(params / (width * width + width)))
    torch.manual_seed(seed)
    model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    for param in model.parameters():
        param.grad = torch.randn_like(param)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return Training(model, optimizer)


# -- measuring helpers -------------------------------------------------------------------------------------


def _proc_status_kib(field_name: str) -> int:
    with open("/proc/self/status") as status:
        return int(re.search(rf"^{field_name}:\s+(\d+) kB", status.read(), re.M).group(1))  # type: ignore[union-attr]


class PeakMemory:
    """RSS high-water mark above the RSS at ``start`` (Linux: VmHWM, reset through /proc/self/clear_refs)."""

    def start(self) -> None:
        gc.collect()
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        self.baseline = _proc_status_kib("VmRSS") * 1024

    def extra_bytes(self) -> int:
        return _proc_status_kib("VmHWM") * 1024 - self.baseline


def drop_from_page_cache(path: Path) -> None:
    """fsync and posix_fadvise(DONTNEED) every file under ``path`` so the next read comes from the disk."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def disk_bytes(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def clear(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


# -- the methods --------------------------------------------------------------------------------------------


@dataclass
class Sample:
    blocked_s: float
    durable_s: float
    restore_s: float
    peak_extra_bytes: int
    disk_bytes: int


class Method:
    name: str
    available = True
    why_unavailable = ""

    def save(self, training: Training, target: Path, step: int) -> tuple[float, float]:
        """(blocked, durable) seconds."""
        raise NotImplementedError

    def restore(self, training: Training, target: Path) -> None:
        raise NotImplementedError


class TorchSave(Method):
    name = "torch.save (sync)"

    def save(self, training: Training, target: Path, step: int) -> tuple[float, float]:
        start = time.perf_counter()
        target.mkdir(parents=True, exist_ok=True)
        staging = target / "state.pt.tmp"
        with open(staging, "wb") as fh:
            torch.save({"model": training.model.state_dict(), "optimizer": training.optimizer.state_dict()}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(staging, target / "state.pt")
        fsync_dir(target)
        elapsed = time.perf_counter() - start
        return elapsed, elapsed

    def restore(self, training: Training, target: Path) -> None:
        loaded = torch.load(target / "state.pt", map_location="cpu", weights_only=True)
        training.model.load_state_dict(loaded["model"])
        training.optimizer.load_state_dict(loaded["optimizer"])


class DcpAsyncSave(Method):
    """torch.distributed.checkpoint.async_save in a single-rank gloo process group."""

    name = "torch DCP async_save"

    def __init__(self) -> None:
        try:
            import torch.distributed as dist
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint import state_dict as dcp_state_dict

            if not dist.is_available():
                raise RuntimeError("torch.distributed is not available in this build")
            if not hasattr(dcp, "async_save"):
                raise RuntimeError(f"torch {torch.__version__} has no torch.distributed.checkpoint.async_save")
            if not dist.is_initialized():
                dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
            self._dcp = dcp
            self._state_dict = dcp_state_dict
        except Exception as error:  # reported in the results, never skipped silently
            self.available = False
            self.why_unavailable = f"{type(error).__name__}: {error}"

    def _current(self, training: Training) -> dict[str, Any]:
        model_state, optimizer_state = self._state_dict.get_state_dict(training.model, training.optimizer)
        return {"model": model_state, "optimizer": optimizer_state}

    def save(self, training: Training, target: Path, step: int) -> tuple[float, float]:
        start = time.perf_counter()
        pending = self._dcp.async_save(self._current(training), checkpoint_id=str(target))
        blocked = time.perf_counter() - start
        pending.result()
        return blocked, time.perf_counter() - start

    def restore(self, training: Training, target: Path) -> None:
        current = self._current(training)
        self._dcp.load(current, checkpoint_id=str(target))
        self._state_dict.set_state_dict(
            training.model,
            training.optimizer,
            model_state_dict=current["model"],
            optim_state_dict=current["optimizer"],
        )


class SpotrunAsync(Method):
    """One Checkpointer for the whole run, as in a training loop: its first save allocates the host
    snapshot, later ones copy into it (see ``first_blocked_s`` in the results)."""

    name = "spotrun Checkpointer"

    def __init__(self) -> None:
        self._ckpt: spotrun.Checkpointer | None = None

    def save(self, training: Training, target: Path, step: int) -> tuple[float, float]:
        if self._ckpt is None:
            self._ckpt = spotrun.Checkpointer(target, every_steps=10**9, keep_last=1, signals=())
        state = spotrun.torch_state(model=training.model, optimizer=training.optimizer)
        start = time.perf_counter()
        self._ckpt.save(state, step, wait=False)
        blocked = time.perf_counter() - start
        self._ckpt.wait()
        return blocked, time.perf_counter() - start

    def restore(self, training: Training, target: Path) -> None:
        with spotrun.Checkpointer(target, keep_last=1, signals=()) as ckpt:
            restored = ckpt.restore(spotrun.torch_state(model=training.model, optimizer=training.optimizer))
        if restored is None:
            raise RuntimeError(f"spotrun found no checkpoint in {target}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def measure(method: Method, training: Training, target: Path, step: int, memory: PeakMemory) -> Sample:
    clear(target)
    expected = training.fingerprint()
    memory.start()
    blocked, durable = method.save(training, target, step)
    peak = memory.extra_bytes()
    written = disk_bytes(target)
    restore = timed_restore(method, training, target, expected)
    clear(target)
    return Sample(blocked, durable, restore, peak, written)


def timed_restore(method: Method, training: Training, target: Path, expected: str, *, warm: int = 0) -> float:
    """Seconds `method` takes to restore `target` into `training`, the files dropped from the page cache first
    (and, with `warm`, that many bytes faulted in and freed just before: memory the host still backs)."""
    with torch.no_grad():
        for param in training.model.parameters():
            param.zero_()  # the restore must bring the weights back for the check below to pass
    drop_from_page_cache(target)
    gc.collect()
    if warm:
        warm_host_memory(warm)
    start = time.perf_counter()
    method.restore(training, target)
    seconds = time.perf_counter() - start
    if training.fingerprint() != expected:
        raise RuntimeError(f"{method.name}: the restored weights differ from the saved ones")
    return seconds


def warm_host_memory(size: int) -> None:
    """Fault in ``size`` bytes and free them: the memory the next allocations get is memory the host backs."""
    memory = hostmem.empty_bytes(size)
    hostmem.fault_in([memory])
    del memory


def _sync_file_range() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").sync_file_range  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


SYNC_FILE_RANGE = _sync_file_range()


def raw_write(target: Path, size: int, chunk: bytes, early_writeback: bool) -> float:
    """Seconds to write ``size`` bytes 64 MiB at a time and fsync them; with ``early_writeback`` the disk
    writes of each chunk are started as soon as it is written (SYNC_FILE_RANGE_WRITE)."""
    clear(target)
    start = time.perf_counter()
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for offset in range(0, size, CHUNK):
            length = min(CHUNK, size - offset)
            os.write(fd, memoryview(chunk)[:length])
            if early_writeback and SYNC_FILE_RANGE is not None:
                SYNC_FILE_RANGE(fd, ctypes.c_int64(offset), ctypes.c_int64(length), ctypes.c_uint(2))
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def raw_write_direct(target: Path, size: int, chunk: bytes) -> float | None:
    """Seconds to write ``size`` bytes with O_DIRECT, 64 MiB at a time from one page-aligned buffer (filled
    before the clock starts), and fsync them; None where O_DIRECT is not available."""
    clear(target)

    def write(fd: int, view: memoryview) -> None:
        for offset in range(0, size, CHUNK):
            os.pwritev(fd, [view[: -(-min(CHUNK, size - offset) // 4096) * 4096]], offset)
        os.ftruncate(fd, size)
        os.fsync(fd)

    return _direct_io_seconds(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, chunk, write)


def _direct_io_seconds(
    target: Path, flags: int, fill: bytes, transfer: Callable[[int, memoryview], None]
) -> float | None:
    """Seconds ``transfer(fd, buffer)`` takes on ``target`` opened with ``flags`` and O_DIRECT, ``buffer`` being
    one page-aligned 64 MiB buffer of huge pages filled with ``fill`` before the clock starts (as spotrun's
    snapshots and restores use: far fewer pages to pin); None where O_DIRECT is not available."""
    if not hasattr(os, "O_DIRECT"):
        return None
    try:
        fd = os.open(target, flags | os.O_DIRECT, 0o644)
    except OSError:
        return None
    buffer = mmap.mmap(-1, CHUNK, flags=mmap.MAP_PRIVATE)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        buffer.madvise(mmap.MADV_HUGEPAGE)
    buffer[:] = fill
    view = memoryview(buffer)
    try:
        start = time.perf_counter()
        transfer(fd, view)
        return time.perf_counter() - start
    except OSError:
        return None
    finally:
        os.close(fd)
        view.release()
        buffer.close()


def raw_disk(target: Path, size: int) -> tuple[float, float, float | None, float, float | None]:
    """(plain write, write with early writeback, O_DIRECT write or None, read, O_DIRECT read or None) seconds
    for ``size`` bytes, sequential, 64 MiB at a time; see the module docstring."""
    target.parent.mkdir(parents=True, exist_ok=True)
    chunk = os.urandom(CHUNK)
    write_direct = raw_write_direct(target, size, chunk)
    write_early = raw_write(target, size, chunk, early_writeback=True)
    write = raw_write(target, size, chunk, early_writeback=False)
    drop_from_page_cache(target)
    buffer = bytearray(CHUNK)
    start = time.perf_counter()
    with open(target, "rb", buffering=0) as fh:
        while fh.readinto(buffer):
            pass
    read = time.perf_counter() - start
    drop_from_page_cache(target)
    read_direct = raw_read_direct(target)
    clear(target)
    return write, write_early, write_direct, read, read_direct


def raw_read_direct(target: Path) -> float | None:
    """Seconds to read ``target`` with O_DIRECT, 64 MiB at a time into one page-aligned buffer of huge pages
    (faulted in before the clock starts, as the buffered read's is); None where O_DIRECT is not available."""

    def read(fd: int, view: memoryview) -> None:
        offset = 0
        while got := os.preadv(fd, [view], offset):
            offset += got

    return _direct_io_seconds(target, os.O_RDONLY, bytes(CHUNK), read)


def fresh_memory(size: int) -> float:
    """Seconds to fault in ``size`` bytes of new memory as spotrun's restore does (huge pages where offered, its
    helper threads): the part of a restore that the raw read, into one buffer mapped beforehand, does not pay."""
    tensor = hostmem.empty_bytes(size)
    start = time.perf_counter()
    hostmem.fault_in([tensor])
    return time.perf_counter() - start


# -- running and reporting --------------------------------------------------------------------------------


@dataclass
class Results:
    state_bytes: int
    raw_write_s: list[float] = field(default_factory=list)
    raw_write_early_s: list[float] = field(default_factory=list)
    raw_write_direct_s: list[float] = field(default_factory=list)
    raw_read_s: list[float] = field(default_factory=list)
    raw_read_direct_s: list[float] = field(default_factory=list)
    fresh_memory_s: list[float] = field(default_factory=list)
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    warm_restore_s: dict[str, list[float]] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)


def run(size_gib: float, repeats: int, root: Path) -> Results:
    training = build_training(int(size_gib * GIB))
    results = Results(state_bytes=training.state_bytes)
    methods: list[Method] = [TorchSave(), DcpAsyncSave(), SpotrunAsync()]
    for method in methods:
        if not method.available:
            results.unavailable[method.name] = method.why_unavailable
    usable = [method for method in methods if method.available]
    memory = PeakMemory()
    for repeat in range(repeats):
        jobs: list[Callable[[], None]] = [lambda: _raw(results, root, training.state_bytes)]
        jobs += [lambda m=method: _one(results, m, training, root, repeat, memory) for method in usable]
        shift = repeat % len(jobs)
        for job in jobs[shift:] + jobs[:shift]:
            job()
        print(f"repeat {repeat + 1}/{repeats} done", file=sys.stderr, flush=True)
    for method in usable:
        results.warm_restore_s[method.name] = warm_restores(method, training, root, repeats)
    return results


def warm_restores(method: Method, training: Training, root: Path, repeats: int) -> list[float]:
    """`repeats` restores of one checkpoint by `method`, each on warm memory (see the module's doc)."""
    target = root / re.sub(r"\W+", "-", method.name).strip("-")  # where its saves go (spotrun's Checkpointer is bound to it)
    clear(target)
    expected = training.fingerprint()
    method.save(training, target, repeats)
    seconds = [timed_restore(method, training, target, expected, warm=2 * training.state_bytes) for _ in range(repeats)]
    clear(target)
    return seconds


def _raw(results: Results, root: Path, size: int) -> None:
    results.fresh_memory_s.append(fresh_memory(size))  # first: the raw disk's seconds pass before any restore
    write, write_early, write_direct, read, read_direct = raw_disk(root / "raw-disk.bin", size)
    if read_direct is not None:
        results.raw_read_direct_s.append(read_direct)
    if write_direct is not None:
        results.raw_write_direct_s.append(write_direct)
    results.raw_write_s.append(write)
    results.raw_write_early_s.append(write_early)
    results.raw_read_s.append(read)


def _one(results: Results, method: Method, training: Training, root: Path, repeat: int, memory: PeakMemory) -> None:
    target = root / re.sub(r"\W+", "-", method.name).strip("-")
    results.samples.setdefault(method.name, []).append(measure(method, training, target, repeat, memory))


def summarize(results: Results) -> dict[str, Any]:
    size = results.state_bytes
    raw_write_plain = size / statistics.median(results.raw_write_s)
    raw_write_early = size / statistics.median(results.raw_write_early_s)
    raw_write_direct = size / statistics.median(results.raw_write_direct_s) if results.raw_write_direct_s else None
    raw_write = max(raw_write_plain, raw_write_early, raw_write_direct or 0.0)
    raw_read_buffered = size / statistics.median(results.raw_read_s)
    raw_read_direct = size / statistics.median(results.raw_read_direct_s) if results.raw_read_direct_s else None
    raw_read = max(raw_read_buffered, raw_read_direct or 0.0)
    methods = {}
    for name, samples in results.samples.items():
        methods[name] = {
            "blocked_s": statistics.median(s.blocked_s for s in samples),
            "durable_s": statistics.median(s.durable_s for s in samples),
            "restore_s": statistics.median(s.restore_s for s in samples),
            "restore_warm_s": statistics.median(results.warm_restore_s[name]),
            "first_blocked_s": samples[0].blocked_s,
            "peak_extra_bytes": max(s.peak_extra_bytes for s in samples),  # the worst save, not the median
            "disk_bytes": statistics.median(s.disk_bytes for s in samples),
        }
        methods[name]["durable_MBps"] = size / methods[name]["durable_s"] / 1e6
        methods[name]["restore_MBps"] = size / methods[name]["restore_s"] / 1e6
        methods[name]["durable_vs_raw_write"] = size / methods[name]["durable_s"] / raw_write
        methods[name]["restore_vs_raw_read"] = size / methods[name]["restore_s"] / raw_read
        methods[name]["restore_vs_raw_read_buffered"] = size / methods[name]["restore_s"] / raw_read_buffered
        methods[name]["restore_warm_MBps"] = size / methods[name]["restore_warm_s"] / 1e6
        methods[name]["restore_warm_vs_raw_read"] = size / methods[name]["restore_warm_s"] / raw_read
        methods[name]["peak_extra_vs_state"] = methods[name]["peak_extra_bytes"] / size
    summary: dict[str, Any] = {
        "state_bytes": size,
        "raw_write_MBps": raw_write / 1e6,
        "raw_write_plain_MBps": raw_write_plain / 1e6,
        "raw_write_early_writeback_MBps": raw_write_early / 1e6,
        "raw_write_direct_MBps": raw_write_direct / 1e6 if raw_write_direct else None,
        "raw_read_MBps": raw_read / 1e6,
        "raw_read_buffered_MBps": raw_read_buffered / 1e6,
        "raw_read_direct_MBps": raw_read_direct / 1e6 if raw_read_direct else None,
        "fresh_memory_MBps": size / statistics.median(results.fresh_memory_s) / 1e6,
        "methods": methods,
        "unavailable": results.unavailable,
    }
    ours, sync = methods.get(SpotrunAsync.name), methods.get(TorchSave.name)
    if ours and sync:
        summary["targets"] = {
            "blocked_vs_torch_save": _target(ours["blocked_s"] / sync["blocked_s"], "<=", TARGET_BLOCKED_RATIO),
            "durable_vs_raw_write": _target(ours["durable_vs_raw_write"], ">=", TARGET_THROUGHPUT_RATIO),
            "restore_vs_raw_read": _target(ours["restore_vs_raw_read"], ">=", TARGET_THROUGHPUT_RATIO),
            "restore_on_warm_memory_vs_raw_read": _target(ours["restore_warm_vs_raw_read"], ">=", TARGET_THROUGHPUT_RATIO),
            "peak_extra_vs_state": _target(ours["peak_extra_vs_state"], "<=", TARGET_PEAK_MEMORY_RATIO),
        }
    return summary


def _target(value: float, relation: str, limit: float) -> dict[str, Any]:
    met = value <= limit if relation == "<=" else value >= limit
    return {"value": value, "target": f"{relation} {limit}", "met": met}


def machine_facts(root: Path) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "memory_GiB": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB, 1),
    }
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            facts["cpu"] = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read(), re.M).group(1)  # type: ignore[union-attr]
        df = subprocess.run(["df", "-T", str(root)], capture_output=True, text=True, check=True).stdout.splitlines()
        facts["filesystem"] = " ".join(df[-1].split()[:2])
    except (OSError, AttributeError, subprocess.CalledProcessError):
        pass
    return facts


def _mbps(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def print_table(summary: dict[str, Any], repeats: int) -> None:
    size = summary["state_bytes"]
    print(f"\nstate: {size / GIB:.3f} GiB ({size / 1e6:.0f} MB), medians of {repeats} repeats")
    print(
        f"raw disk: write {summary['raw_write_MBps']:.0f} MB/s (fsynced; plain {summary['raw_write_plain_MBps']:.0f}, "
        f"early writeback {summary['raw_write_early_writeback_MBps']:.0f}, "
        f"O_DIRECT {_mbps(summary['raw_write_direct_MBps'])}), read {summary['raw_read_MBps']:.0f} MB/s "
        f"(buffered {summary['raw_read_buffered_MBps']:.0f}, O_DIRECT {_mbps(summary['raw_read_direct_MBps'])}; "
        "cache dropped)"
    )
    print(f"fresh memory faulted in (not a target; what a restore pays and the raw read does not): {summary['fresh_memory_MBps']:.0f} MB/s")
    header = (
        f"{'method':<24}{'1st blocked':>12}{'blocked s':>10}{'durable s':>10}{'MB/s':>7}{'vs raw':>7}{'restore s':>10}"
        f"{'MB/s':>7}{'vs raw':>7}{'warm s':>8}{'vs raw':>7}{'peak extra':>11}"
    )
    print(header)
    print("-" * len(header))
    for name, m in summary["methods"].items():
        print(
            f"{name:<24}{m['first_blocked_s']:>12.3f}{m['blocked_s']:>10.3f}{m['durable_s']:>10.3f}{m['durable_MBps']:>7.0f}"
            f"{m['durable_vs_raw_write']:>7.2f}{m['restore_s']:>10.3f}{m['restore_MBps']:>7.0f}"
            f"{m['restore_vs_raw_read']:>7.2f}{m['restore_warm_s']:>8.3f}{m['restore_warm_vs_raw_read']:>7.2f}"
            f"{m['peak_extra_vs_state']:>10.2f}x"
        )
    for name, why in summary["unavailable"].items():
        print(f"{name:<24}unavailable: {why}")
    for name, target in summary.get("targets", {}).items():
        print(f"target {name}: {target['value']:.3f} (want {target['target']}): {'met' if target['met'] else 'MISSED'}")
    ratios = ", ".join(f"{name} {m['restore_vs_raw_read_buffered']:.2f}" for name, m in summary["methods"].items())
    print(f"restore vs the buffered raw read alone (the raw read figure before O_DIRECT was measured): {ratios}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gib", type=float, default=1.0, help="training state size (model + Adam state)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary folder)")
    parser.add_argument("--json", type=Path, default=None, help="results file (default: <dir>/checkpoint-benchmark.json)")
    args = parser.parse_args(argv)
    if args.size_gib <= 0 or args.repeats < 1:
        parser.error("--size-gib must be positive and --repeats at least 1")
    root = args.dir or Path(tempfile.mkdtemp(prefix="spotrun-ckpt-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    results = run(args.size_gib, args.repeats, root)
    summary = summarize(results)
    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine_facts(root),
        "summary": summary,
        "samples": {
            "raw_write_s": results.raw_write_s,
            "raw_write_early_writeback_s": results.raw_write_early_s,
            "raw_write_direct_s": results.raw_write_direct_s,
            "raw_read_s": results.raw_read_s,
            "raw_read_direct_s": results.raw_read_direct_s,
            "fresh_memory_s": results.fresh_memory_s,
            **{name: [vars(s) for s in samples] for name, samples in results.samples.items()},
            "warm_restore_s": results.warm_restore_s,
        },
    }
    json_path = args.json or root / "checkpoint-benchmark.json"
    json_path.write_text(json.dumps(report, indent=1))
    print_table(summary, args.repeats)
    print(f"\nresults: {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
