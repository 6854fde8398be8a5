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

# The native trace decoder (traceadvisor/trace/_kineto.c) is compiled at install by hatch_build.py;
# an edit to it re-installs. Where no C compiler exists the demo still runs (pure-Python decoder);
# the tests insist on it (TRACEADVISOR_REQUIRE_NATIVE), so CI notices a build that lost it.
NATIVE_SRC := hatch_build.py traceadvisor/trace/_kineto.c

$(VENV)/.installed-base: pyproject.toml $(NATIVE_SRC) | $(VENV)/bin/python
	$(PIP) -e .
	touch $@

# torch is pinned first: 2.13.0 is the CPU build this kind of machine carries; an unpinned torch
# (pulled by lightning or transformers) would fetch gigabytes of CUDA packages instead.
$(VENV)/.installed-test: pyproject.toml $(NATIVE_SRC) | $(VENV)/bin/python
	$(PIP) torch==2.13.0
	TRACEADVISOR_REQUIRE_NATIVE=1 $(PIP) -e ".[test,hta,capture,integrations,dask]"
	touch $@ $(VENV)/.installed-base

demo: $(VENV)/.installed-base
	$(VENV)/bin/traceadvisor analyze $(DEMO_TRACE)

# The layers (docs/architecture.md): import-linter's contracts in pyproject.toml over the package,
# the rules' one import (rules_api), and mypy over the package and, on its own, the rule files
# (not a package: each is a top-level module, as the registry loads it).
lint: $(VENV)/.installed-test
	$(PY) -m ruff check traceadvisor rules tests hatch_build.py $(wildcard bench)
	$(PY) -m ruff format --check traceadvisor rules tests
	$(PY) -m mypy
	$(PY) -m mypy rules
	$(VENV)/bin/lint-imports
	$(PY) -m traceadvisor.engine.lint rules

test: $(VENV)/.installed-test lint
	TRACEADVISOR_REQUIRE_NATIVE=1 $(PY) -m pytest

bench: $(VENV)/.installed-test
	$(PY) bench/run.py
	$(PY) bench/ranks_scale.py --build traceadvisor.pipeline:rank_summary --combine traceadvisor.pipeline:analyze_summaries
	$(PY) bench/html_report.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache traceadvisor/trace/_kineto*.so
