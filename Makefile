PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
DEVSTAMP := $(VENV)/.installed-dev

.PHONY: demo demo-ddp test soak install dev clean browser

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# torch==2.13.0 is a CPU build on this machine's disk; a plain "torch" would pull a multi-GB CUDA build.
# pip byte-compiles what it installs. With --no-compile a fresh install took about a minute less, but where
# PYTHONDONTWRITEBYTECODE is set (as on this project's machines) every process then compiles what it imports:
# `pytest` took 800 s in a fresh clone, against 660 s for the commit before, which ran 8 more tests.
$(STAMP): $(PY) pyproject.toml
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[torch]' scikit-learn
	touch $@

$(DEVSTAMP): $(STAMP)
	$(PIP) install -q -e '.[torch,dev]'
	touch $@

# The dashboard's browser test drives Debian's Chromium; without it (no apt, no root) that test skips, saying why.
browser:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } \
		|| echo "chromium could not be installed: the dashboard's browser test will be skipped"

install: $(STAMP)

dev: $(DEVSTAMP)

demo: $(STAMP)
	$(PY) examples/digits/demo.py

# A 3-node DDP job that loses its master and a worker and still resumes exactly.
demo-ddp: $(STAMP)
	$(PY) examples/ddp/demo.py

# Two workers: most tests wait on processes, sockets and disks, so the suite takes ~60% of the time it takes in one.
# The e2e tests (each runs a controller, agents and several trainers) share one worker, one at a time.
# The tests start hundreds of Python processes (agents, CLI commands, controllers); where PYTHONDONTWRITEBYTECODE is set
# (as on this project's machines) each compiled src/spotrun again. Compiled once here, a CLI-heavy test file took 0.8x.
test: $(DEVSTAMP) browser
	$(PY) -m compileall -q src
	$(PY) -m pytest -q --numprocesses 2 --dist loadgroup

# The runs `make test` leaves out (marked soak) to stay under 15 minutes on 2 cores: the policy research's
# diagnostics on small traces, the long checkpoint-kill trials, and the slower end-to-end runs whose parts the suite
# tests elsewhere (each soak mark says where). The e2e ones run one at a time here too.
soak: $(DEVSTAMP)
	$(PY) -m compileall -q src
	$(PY) -m pytest -q --numprocesses 2 --dist loadgroup -m soak

clean:
	rm -rf $(VENV) .spotrun-demo .spotrun-demo-ddp
