# The first two are safe on a fresh machine: they build .venv from the pinned requirements
# first (once; again when the pins change).
#   make run   - the default study (offline, CPU) and its reports
#   make test  - the test suite (CI runs this one)
#   make test-fast - all but the real workflow, SLURM, browser and full-model subprocess runs
# The GPU targets run in the Python they are started with ($(PYTHON), default python3) and
# never build, touch or replace .venv or torch: a GPU machine's torch is the one matched to its
# driver. nnperf comes from src/ (PYTHONPATH), Snakemake is `$(PYTHON) -m snakemake`; nothing
# is downloaded, so offline is fine once this Python has nnperf's packages. Each starts with
# `nnperf gpu-env`: one line and a non-zero exit when this Python's torch has no CUDA, or when
# packages are missing (all named, with the pip command), then `nnperf gpu-study`: the doctor's
# checks once (driver vs torch's CUDA build, ncu and its counter permission, NVML; it stops
# with the fix when the study lacks something), then the study one stage at a time
# (data/complexity/ceilings, timed runs, ncu, operator profiles, training,
# tables/figures/report, snakemake --report), each stage's wall time recorded beside the
# report, its tables and the machine (CSV and README table) in the example folder.
#   make gpu-check - config/gpu-check.yaml: every CUDA path once, small, sized for the few
#                    minutes a lent GPU machine gives; example in $(GPU_CHECK_DEST)
#   make gpu-study - config/gpu.yaml on synthetic data of CIFAR-10's size (about half an
#                    hour); example in $(GPU_STUDY_DEST)
# Anything else is plain Snakemake: .venv/bin/snakemake --cores all [target]

VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
CORES ?= all
# pip itself is pinned too: tests/project/test_envs.py drives its resolver for other platforms.
PIP_VERSION ?= 26.3
# TORCH_INDEX: an index of CPU-only torch builds, e.g.
#   make run TORCH_INDEX=https://download.pytorch.org/whl/cpu
# On Linux that installs torch/torchvision 2.14.1+cpu (~200 MB) instead of PyPI's build and
# its CUDA runtime (~5 GB), leaving out the pins only that runtime needs (the lines of
# envs/requirements-cpu.txt marked CUDA_PINS). On macOS PyPI's torch is CPU-only already.
# Empty (the default, and CI): the pinned file as it is, from PyPI alone. It applies when .venv
# is built; remove .venv to switch.
TORCH_INDEX ?=
CUDA_PINS := platform_system == "Linux"

# make gpu-study: the study, its data (synthetic, CIFAR-10's size: no download) and where
# its example report goes.
GPU_STUDY_CONFIG ?= config/gpu.yaml
GPU_STUDY_DATA ?= dataset={name: synthetic, synthetic: {train_images: 50000, test_images: 10000}}
GPU_STUDY_DEST ?= reports/examples/h100-gpu-study
# make gpu-check: its example report's folder (the study is config/gpu-check.yaml).
GPU_CHECK_DEST ?= reports/examples/h100-gpu-check
# nnperf as the GPU targets run it: this checkout's src/ first on PYTHONPATH, whatever else
# the caller put there kept after it (a --target folder of wheels, say).
GPU_NNPERF = PYTHONPATH="$(CURDIR)/src$${PYTHONPATH:+:$$PYTHONPATH}" $(PYTHON) -m nnperf

.PHONY: run test test-fast check report clean-results gpu-check gpu-study

$(VENV)/.installed: envs/requirements-cpu.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet pip==$(PIP_VERSION)
ifeq ($(TORCH_INDEX),)
	$(BIN)/python -m pip install --quiet -r envs/requirements-cpu.txt
else
	grep -v -F '$(CUDA_PINS)' envs/requirements-cpu.txt > $(VENV)/requirements-torch-cpu.txt
	$(BIN)/python -m pip install --quiet --extra-index-url $(TORCH_INDEX) \
		-r $(VENV)/requirements-torch-cpu.txt
endif
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

# The summary's folder is the study's dataset: synthetic in config/config.yaml
# (reports/<dataset>/summary.html when it names another).
run: $(VENV)/.installed
	$(BIN)/snakemake --cores $(CORES)
	$(BIN)/snakemake --report reports/report.html
	@echo "nnperf: the summary is reports/synthetic/summary.html; Snakemake's report is reports/report.html"

gpu-check:
	@$(GPU_NNPERF) gpu-env
	$(GPU_NNPERF) gpu-study --check --dest $(GPU_CHECK_DEST) --cores $(CORES)

gpu-study:
	@$(GPU_NNPERF) gpu-env
	$(GPU_NNPERF) gpu-study --configfile $(GPU_STUDY_CONFIG) --config '$(GPU_STUDY_DATA)' \
		--dest $(GPU_STUDY_DEST) --cores $(CORES)

test: $(VENV)/.installed
	$(BIN)/python -m pytest

test-fast: $(VENV)/.installed
	$(BIN)/python -m pytest -m "not workflow and not slurm and not browser and not slow"

# What CI checks before the tests: formatting, lint and dry runs of the study configs.
check: $(VENV)/.installed
	$(BIN)/snakefmt --check .
	$(BIN)/snakemake --lint
	$(BIN)/snakemake --dry-run --quiet --cores 2
	$(BIN)/snakemake --dry-run --quiet --cores 2 --configfile config/gpu.yaml --config 'ncu={enabled: true}'
	$(BIN)/snakemake --dry-run --quiet --cores 2 --configfile config/gpu-check.yaml --config 'ncu={enabled: true}'
