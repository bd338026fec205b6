# Two entry points, both safe on a fresh machine: they build .venv from the pinned
# requirements first (once; again when the pins change).
#   make run   - the default study (offline, CPU) and its reports
#   make test  - the test suite (CI runs this one)
#   make test-fast - all but the real workflow, SLURM, browser and full-model subprocess runs
# Anything else is plain Snakemake: .venv/bin/snakemake --cores all [target]

VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
CORES ?= all

.PHONY: run test test-fast check report clean-results

$(VENV)/.installed: envs/requirements-cpu.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r envs/requirements-cpu.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

run: $(VENV)/.installed
	$(BIN)/snakemake --cores $(CORES)
	$(BIN)/snakemake --report reports/report.html

test: $(VENV)/.installed
	$(BIN)/python -m pytest

test-fast: $(VENV)/.installed
	$(BIN)/python -m pytest -m "not workflow and not slurm and not browser and not slow"

# What CI checks before the tests: formatting, lint and dry runs of both study configs.
check: $(VENV)/.installed
	$(BIN)/snakefmt --check .
	$(BIN)/snakemake --lint
	$(BIN)/snakemake --dry-run --quiet --cores 2
	$(BIN)/snakemake --dry-run --quiet --cores 2 --configfile config/gpu.yaml --config 'ncu={enabled: true}'
