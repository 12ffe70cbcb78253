"""How fast this machine faults in new memory, depending on how long ago the memory was freed: a diagnostic for the
checkpoint benchmark's restore figures (docs/benchmarks.md, "Re-measured (2026-11-24, fourth session)").

    python benchmarks/host_memory.py --gib 4 --waits 0 1 3 5

Some VMs hand the memory their guest frees back to the host after a delay (virtio-balloon free page reporting);
memory the guest then faults in again costs the host's faults too. The script faults in ``--gib`` of memory as
spotrun's restore does (``hostmem``: huge pages, helper threads), frees it, waits, and does it again, once per
wait. A machine without that behaviour shows about the same rate for every wait after the first touch.
"""

from __future__ import annotations

import argparse
import gc
import time

from spotrun.sdk import hostmem

GIB = 1 << 30


def fault_in_seconds(nbytes: int) -> float:
    memory = hostmem.empty_bytes(nbytes)
    start = time.perf_counter()
    hostmem.fault_in([memory])
    seconds = time.perf_counter() - start
    del memory
    gc.collect()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=4.0, help="memory faulted in each time")
    parser.add_argument("--waits", type=float, nargs="+", default=[0.0, 1.0, 3.0, 5.0], help="seconds to wait after a free")
    args = parser.parse_args()
    nbytes = int(args.gib * GIB)
    first = fault_in_seconds(nbytes)
    print(f"first touch: {nbytes / first / 1e9:.1f} GB/s")
    for wait in args.waits:
        time.sleep(wait)
        seconds = fault_in_seconds(nbytes)
        print(f"{wait:g} s after the previous free: {nbytes / seconds / 1e9:.1f} GB/s")


if __name__ == "__main__":
    main()
