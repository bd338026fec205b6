"""The one contract between the workflow and the library: typed, torch-free requests.

Every setting a job needs travels as one of these frozen dataclasses. The workflow builds
them once (`common.smk`, from the validated config and the wildcards) and hands them to a
few-line adapter in `workflow/scripts/`; a person builds the same ones from `nnperf` flags;
a process run under `ncu` reads one from a JSON file. So a default lives here and nowhere
else: the config schema's defaults are checked against these fields key by key
(`tests/core/test_contract.py`), and the library's functions take a request instead of loose
keyword arguments with defaults of their own.

Three modules hold it, and this one names them all, so `contract.RunRequest` is how every
caller spells a request whichever module defines it:

* **settings** (`nnperf.core.settings`), one per config section (`TrainingSettings` is
  `training:`, `VariantSettings` one entry of `variants:`, ...), and `StudyConfig` for the
  whole file;
* **requests** (`nnperf.core.requests`), one per job (`RunRequest` is one timed run,
  `ProfileStepRequest` the step under ncu, ...), made of keys (`nnperf.core.keys.RunKey`)
  and settings;
* **plain data** (`nnperf.core.plaindata`): `to_dict()` / `from_dict()` turn any of them into
  JSON-able data and back, strictly (an unknown key or a value of the wrong type is one line
  naming the key and what is allowed). Snakemake's `params:` must be plain data for its
  change detection to see them (it records only builtin values), so that is how requests
  cross into a script.
"""

from __future__ import annotations

from nnperf.core.keys import RunKey
from nnperf.core.plaindata import from_dict, read_request, to_dict, to_json, write_request
from nnperf.core.requests import (
    CeilingsRequest,
    ComplexityRequest,
    DatasetRequest,
    FigureRequest,
    OperatorProfileRequest,
    ProfileStepRequest,
    ReportRequest,
    RunRequest,
    TablesRequest,
    TrainingRunRequest,
    dataset_root,
)
from nnperf.core.settings import (
    CeilingsSettings,
    ConvergenceSelection,
    ConvergenceSettings,
    DatasetSettings,
    ModelSource,
    NcuSettings,
    OperatorProfileSettings,
    ReportSettings,
    StudyConfig,
    StudyInfo,
    SyntheticData,
    TimingSettings,
    TrainingSettings,
    VariantSettings,
)

__all__ = [
    "CeilingsRequest",
    "CeilingsSettings",
    "ComplexityRequest",
    "ConvergenceSelection",
    "ConvergenceSettings",
    "DatasetRequest",
    "DatasetSettings",
    "FigureRequest",
    "ModelSource",
    "NcuSettings",
    "OperatorProfileRequest",
    "OperatorProfileSettings",
    "ProfileStepRequest",
    "ReportRequest",
    "ReportSettings",
    "RunKey",
    "RunRequest",
    "StudyConfig",
    "StudyInfo",
    "SyntheticData",
    "TablesRequest",
    "TimingSettings",
    "TrainingRunRequest",
    "TrainingSettings",
    "VariantSettings",
    "dataset_root",
    "from_dict",
    "read_request",
    "to_dict",
    "to_json",
    "write_request",
]
