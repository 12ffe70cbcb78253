PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
DEVSTAMP := $(VENV)/.installed-dev

.PHONY: demo test install dev clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# torch==2.13.0 is a CPU build on this machine's disk; a plain "torch" would pull a multi-GB CUDA build.
$(STAMP): $(PY) pyproject.toml
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[torch]' scikit-learn
	touch $@

$(DEVSTAMP): $(STAMP)
	$(PIP) install -q -e '.[torch,dev]'
	touch $@

install: $(STAMP)

dev: $(DEVSTAMP)

demo: $(STAMP)
	$(PY) examples/digits/demo.py

test: $(DEVSTAMP)
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) .spotrun-demo
