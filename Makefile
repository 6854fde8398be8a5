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

$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
	$(PIP) -e ".[test,hta]"
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
