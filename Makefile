# The two commands of the README: `make up` runs the daemon on its embedded
# defaults, `make test` runs the tests. Both create the virtual environment
# when it is missing and reinstall when pyproject.toml changes.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: up test lint bench

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

up: $(STAMP)
	$(VENV)/bin/asyncai up

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP)
	for b in bench/*.py; do $(PY) $$b || exit 1; done
