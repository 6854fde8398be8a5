# Two commands on a fresh machine: `make demo` and `make test`. Each creates .venv and installs
# what it needs; nothing outside the repository is assumed but python3.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
DEMO_TRACE ?= fixtures/traces/train_step.json.gz

.PHONY: demo test lint bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-base: pyproject.toml | $(VENV)/bin/python
	$(PIP) -e .
	touch $@

# torch is pinned first: 2.13.0 is the CPU build this kind of machine carries; an unpinned torch
# (pulled by lightning or transformers) would fetch gigabytes of CUDA packages instead.
$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
	$(PIP) torch==2.13.0
	$(PIP) -e ".[test,hta,capture,integrations]"
	touch $@ $(VENV)/.installed-base

demo: $(VENV)/.installed-base
	$(VENV)/bin/traceadvisor analyze $(DEMO_TRACE)

lint: $(VENV)/.installed-test
	$(PY) -m ruff check traceadvisor rules tests $(wildcard bench)
	$(PY) -m ruff format --check traceadvisor rules tests
	$(PY) -m mypy

test: $(VENV)/.installed-test lint
	$(PY) -m pytest

bench: $(VENV)/.installed-test
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
