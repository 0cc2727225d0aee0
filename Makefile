# The one place to look for how to do things. Works on a machine with only
# Python >= 3.11, git and make: the first target creates .venv and installs.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-all lint docs format dev worker clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)        ## the offline demo: a real bug fixed after one round of feedback
	$(BIN)/loop demo

test: $(STAMP)        ## every test: unit, time-skipping, real dev server, crash
	$(BIN)/python -m pytest -q -rs

lint: $(STAMP) docs  ## ruff, mypy, vulture, and the documentation site built strictly
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/vulture

docs: $(STAMP)        ## the documentation site into site/: a broken link or a reference that disagrees with the code fails
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

dev: $(STAMP)         ## the embedded Temporal server with its UI on :8233
	$(BIN)/loop dev

worker: $(STAMP)
	$(BIN)/loop worker

clean:
	rm -rf $(VENV) .loop .pytest_cache .ruff_cache *.egg-info site
