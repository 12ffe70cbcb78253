"""Run by test_state_migrations as a separate process: wait for the go file, then migrate the database at argv[1]."""

import sys
import time
from pathlib import Path

from spotrun.state import Store

url, ready_file, go_file = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
store = Store(url, migrate=False)  # imports done, no connection yet: the race starts at the go signal
ready_file.touch()
deadline = time.monotonic() + 30
while not go_file.exists():
    if time.monotonic() > deadline:
        sys.exit("no go signal within 30 s")
    time.sleep(0.001)
store.upgrade()
store.dispose()
