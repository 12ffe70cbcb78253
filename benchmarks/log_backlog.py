"""The agent's log shipping with a backlog (a trainer's output burst, or the controller away for a while): how long
cutting one chunk off the front of it takes, nothing sent.

    .venv/bin/python benchmarks/log_backlog.py [--backlog-mb 52]

The backlog is ~64 KiB writes (the agent reads the trainer's output so), lines with a non-ASCII character. Prints
the milliseconds per chunk over the first 20 chunks. Run it with ``PYTHONPATH=<another tree>/src`` to measure that
tree's shipper.
"""

from __future__ import annotations

import argparse
import time

from spotrun.agent.logs import LogShipper

CHUNKS = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog-mb", type=float, default=52.0)
    args = parser.parse_args()
    shipper = LogShipper(client=None)  # type: ignore[arg-type]  (nothing is sent)
    piece = ("x" * 200 + "\u2588" + "\n") * 320
    writes = int(args.backlog_mb * 1e6 / len(piece))
    for _ in range(writes):
        shipper.write(piece)
    started = time.perf_counter()
    for _ in range(CHUNKS):
        with shipper._lock:
            shipper._next_chunk()
            shipper._in_flight = None
    per_chunk = (time.perf_counter() - started) / CHUNKS * 1000
    print(f"{per_chunk:.2f} ms per chunk over the first {CHUNKS} chunks of a {len(piece) * writes / 1e6:.0f} MB backlog")


if __name__ == "__main__":
    main()
