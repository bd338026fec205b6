"""Which machine produced a result, and the merge of results from several machines.

A machine is told apart by its environment record (the `environment` of every run JSON):
the host name plus the name of the device that ran (a GPU model, or the CPU model for
`cpu`). `environment_frame` flattens those records into a tidy table (one row per run JSON,
i.e. per measured configuration: the file `results/tables/environment.csv`); `machine_map` turns the environment tables of one
or more `results/` folders into a `(results_dir, device) -> machine` mapping, and
`attach_machine` / `combine` give every other table (summary, runs, roofline points,
kernels) a `machine` column so that results from a laptop, a workstation and a cloud GPU
sit side by side.

All functions take data and return data, except `write_environment_table`, the edge of rule
`environment_table`. Reading results folders is `nnperf.report.results`' job, the report text
`nnperf.report.sections`' and the comparison figure `nnperf.report.plots.machines`'.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping

import pandas as pd

from nnperf.core import files
from nnperf.core.errors import NnperfError
from nnperf.core.vocab import CONFIG_KEYS, REFERENCE_VARIANT, precision_rank
from nnperf.report.aggregate import read_runs

# One run JSON measures one configuration (all its worker processes), so its keys are the
# configuration's.
RUN_KEYS = CONFIG_KEYS

# Fields of the environment record shown in the report, one row each, with the label a
# reader knows them by. Columns are the flattened names `environment_frame` writes, except
# `torch_build`, which `machine_table` fills (see BUILD_FIELDS).
MACHINE_FIELDS = (
    ("Device name", "device_name"),
    ("Host name", "hostname"),
    ("Device", "device"),
    ("GPU compute capability", "gpu_capability"),
    ("GPU memory", "gpu_total_memory_bytes"),
    ("GPU SM clock (MHz)", "clocks_gpu_sm_mhz"),
    ("GPU max SM clock (MHz)", "clocks_gpu_max_sm_mhz"),
    ("Driver", "driver"),
    ("CUDA", "cuda"),
    ("cuDNN", "cudnn"),
    ("torch build", "torch_build"),
    ("CPU model", "cpu_model"),
    ("Logical CPUs", "cpu_count_logical"),
    ("CPUs usable (affinity)", "cpu_affinity_count"),
    ("torch threads", "cpu_threads"),
    ("CPU clock, mean (MHz)", "clocks_cpu_mhz_mean"),
    ("torch", "torch"),
    ("torchvision", "torchvision"),
    ("Python", "python"),
    ("Platform", "platform"),
    ("nnperf", "nnperf"),
    ("Workflow git commit", "git_commit"),
    ("Local changes", "git_dirty"),
    ("SLURM job", "slurm_job_id"),
    ("SLURM node", "slurm_node"),
)

# Environment fields that describe the torch build, not the machine: the record's `cuda` is
# `torch.version.cuda` and its `cudnn` `torch.backends.cudnn.version()`, which a CUDA wheel
# reports on any host. They are the CUDA and cuDNN that ran only where a run used the GPU;
# a machine whose runs are all on the CPU (or MPS) shows them as the torch build instead.
BUILD_FIELDS = {"cuda": "CUDA", "cudnn": "cuDNN"}
GPU_DEVICE = "cuda"

# Settings recorded per run that follow the variant and precision, not the machine: the
# environment record's own (what torch was set to), then every other toggle of the variant
# (`variant_<name>` columns: DataLoader workers, pinned memory, prefetching, threads, and
# whatever toggle a variant gains later). The settings table shows those that differ.
SETTING_FIELDS = (
    "tf32",
    "cudnn_benchmark",
    "memory_format",
    "amp_dtype",
    "grad_scaler",
    "compile_mode",
    "optimizer_impl",
    "optimizer_impl_resolved",
    "data_path",
)
# Variant toggles the environment record already shows under its own name.
RECORDED_TOGGLES = {
    "channels_last": "memory_format",
    "compile": "compile_mode",
    "cudnn_benchmark": "cudnn_benchmark",
    "optimizer_impl": "optimizer_impl",
    "data_path": "data_path",
}
VARIANT_PREFIX = "variant_"


def machine_label(hostname: object, device_name: object, device: object = None) -> str:
    """`<device name> (<host>)`: what the report calls a machine."""
    name = _text(device_name) or _text(device) or "unknown device"
    host = _text(hostname)
    return f"{name} ({host})" if host else name


def _text(value: object) -> str | None:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    text = str(value).strip()
    return text or None


def environment_frame(run_documents: Iterable[Mapping]) -> pd.DataFrame:
    """One row per run JSON: its config keys, status, `machine` and flat environment.

    Nested environment fields are flattened with `_` (`clocks.gpu_sm_mhz` becomes
    `clocks_gpu_sm_mhz`), so nothing in the record is lost.
    """
    rows = []
    for document in run_documents:
        environment = dict(document.get("environment") or {})
        flat = pd.json_normalize(environment, sep="_").to_dict("records")[0] if environment else {}
        # `device` inside the record names the nnperf device; the run key wins if they differ.
        flat.pop("device", None)
        row = {key: document.get(key) for key in RUN_KEYS}
        row["status"] = document.get("status")
        # The variant's toggles as runs.csv carries them (nnperf.report.aggregate).
        for name, value in (document.get("variant_settings") or {}).items():
            row[VARIANT_PREFIX + name] = value
        row["machine"] = machine_label(
            environment.get("hostname"), environment.get("device_name"), document.get("device")
        )
        row.update({f"env_{k}" if k in row else k: v for k, v in flat.items()})
        rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=[*RUN_KEYS, "status", "machine"])
    return frame.sort_values(list(RUN_KEYS), key=_in_vocabulary_order, kind="stable").reset_index(
        drop=True
    )


def _in_vocabulary_order(column: pd.Series) -> pd.Series:
    """Sort key: precisions in the shared order, the reference variant first."""
    if column.name == "precision":
        return column.map(precision_rank)
    if column.name == "variant":
        return column.astype(str).map(lambda v: f"{int(v != REFERENCE_VARIANT)}{v}")
    return column


def write_environment_table(
    runs: Iterable[str | os.PathLike], out: str | os.PathLike
) -> pd.DataFrame:
    """The environment record of every run JSON as one table (rule `environment_table`)."""
    paths = list(runs)
    if not paths:
        raise NnperfError("environment table: no run JSON files given")
    # Read as aggregation reads them: every bad run JSON is named in one line.
    frame = environment_frame(document for _, document in read_runs(paths))
    files.write_csv(out, frame)
    print(
        f"environment table: {len(frame)} configurations on {frame['machine'].nunique()} "
        "machine(s) "
        f"-> {os.fspath(out)}"
    )
    return frame


def machine_map(environments: Mapping[str, pd.DataFrame | None]) -> pd.DataFrame:
    """`results_dir, device, machine` for every device that ran in every results folder.

    `environments` maps a results folder to its environment table (or None when it has
    none: its devices are then named after the folder). A device on which several hosts ran
    (a cluster partition) gets the hosts' labels joined with ` + `. When two folders yield
    the same label (the same machine measured twice), the folder is added to the label so
    the two stay apart in every table and figure.
    """
    rows = []
    for results_dir, environment in environments.items():
        if environment is None or environment.empty:
            continue
        for device, group in environment.groupby("device", sort=True):
            labels = sorted(set(group["machine"].dropna().astype(str)))
            rows.append(
                {
                    "results_dir": results_dir,
                    "device": device,
                    "machine": " + ".join(labels) or f"{device} ({results_dir})",
                }
            )
    mapping = pd.DataFrame(rows, columns=["results_dir", "device", "machine"])
    folders_per_label = mapping.groupby("machine")["results_dir"].transform("nunique")
    clash = folders_per_label > 1
    mapping.loc[clash, "machine"] = (
        mapping.loc[clash, "machine"] + " [" + mapping.loc[clash, "results_dir"] + "]"
    )
    return mapping


def attach_machine(
    frame: pd.DataFrame | None, mapping: pd.DataFrame, results_dir: str
) -> pd.DataFrame | None:
    """`frame` (a table from `results_dir`) with `machine` and `results_dir` columns first.

    Rows whose device has no environment record are labelled `<device> (<results_dir>)`.
    """
    if frame is None:
        return None
    here = mapping[mapping["results_dir"] == results_dir][["device", "machine"]]
    result = frame.drop(columns=["machine", "results_dir"], errors="ignore")
    if "device" in result.columns:
        result = result.merge(here, on="device", how="left")
        missing = result["machine"].isna()
        result.loc[missing, "machine"] = (
            result.loc[missing, "device"].astype(str) + f" ({results_dir})"
        )
    else:
        result["machine"] = " + ".join(here["machine"]) or results_dir
    result["results_dir"] = results_dir
    first = ["machine", "results_dir"]
    return result[first + [c for c in result.columns if c not in first]]


def combine(frames: Iterable[pd.DataFrame | None]) -> pd.DataFrame | None:
    """Concatenate tables from several folders that already carry `machine` columns.

    None where no folder had the table. Columns missing in one folder's table (an older
    pipeline version) are left empty for its rows.
    """
    present = [frame for frame in frames if frame is not None and not frame.empty]
    if not present:
        return None
    return pd.concat(present, ignore_index=True, sort=False)


def cudnn_text(value: object) -> str | None:
    """cuDNN's version number as a version: 91300 -> `9.13.0`, 8902 -> `8.9.2`.

    `torch.backends.cudnn.version()` returns CUDNN_VERSION, which cuDNN 9 encodes as
    major x 10000 + minor x 100 + patch and cuDNN 8 and older as major x 1000 + minor x 100
    + patch (cudnn_version.h)."""
    text = _display(value)
    if text is None or not text.isdigit():
        return text
    number = int(text)
    major, rest = divmod(number, 10000) if number >= 90000 else divmod(number, 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _seen(group: pd.DataFrame, field: str) -> list[str]:
    """The distinct values a machine's runs recorded for `field`, as display text."""
    if field not in group.columns:
        return []
    if field.endswith("_bytes"):
        shown = [_display_bytes(v) for v in group[field].tolist()]
    elif field == "cudnn":
        shown = [cudnn_text(v) for v in group[field].tolist()]
    else:
        shown = [_display(v) for v in group[field].tolist()]
    return list(dict.fromkeys(v for v in shown if v is not None))


def _machine_column(group: pd.DataFrame) -> list[str | None]:
    """One machine's cells, in `MACHINE_FIELDS` order."""
    # Without a device column (not written by nnperf) nothing is known: shown as recorded.
    devices = _seen(group, "device") or [GPU_DEVICE]
    build = []
    values = {}
    for _, field in MACHINE_FIELDS:
        seen = _seen(group, field)
        if field in BUILD_FIELDS and GPU_DEVICE not in devices:
            # The torch build's CUDA / cuDNN, not this machine's: named as such.
            build += [f"{BUILD_FIELDS[field]} {v}" for v in seen]
            values[field] = f"not used ({', '.join(devices)} runs)" if seen else None
        else:
            values[field] = ", ".join(seen) if seen else None
    values["torch_build"] = ", ".join(build) if build else None
    return [values[field] for _, field in MACHINE_FIELDS]


def machine_table(environment: pd.DataFrame | None) -> pd.DataFrame:
    """Fields as rows, one column per machine: what the environment section shows.

    A field that differs between a machine's runs lists every value seen, so a driver
    update in the middle of a study is visible rather than hidden. CUDA and cuDNN are the
    versions that ran on a machine with GPU runs; on one whose runs all used the CPU they
    read "not used" and the torch build's versions go to the `torch build` row, so a CPU
    study does not present a CUDA wheel's runtime as its machine's.
    """
    if environment is None or environment.empty:
        return pd.DataFrame(columns=["Field"])
    columns = {
        machine: _machine_column(group)
        for machine, group in environment.groupby("machine", sort=True)
    }
    table = pd.DataFrame(columns, index=[label for label, _ in MACHINE_FIELDS])
    table = table.dropna(how="all")
    table.index.name = "Field"
    return table.reset_index()


def setting_fields(environment: pd.DataFrame) -> list[str]:
    """The settings columns `environment` can show: the recorded ones (SETTING_FIELDS), then
    each variant toggle the record does not already show (`variant_<name>`)."""
    toggles = [
        c
        for c in environment.columns
        if c.startswith(VARIANT_PREFIX) and c.removeprefix(VARIANT_PREFIX) not in RECORDED_TOGGLES
    ]
    return [f for f in SETTING_FIELDS if f in environment.columns] + toggles


def _settings_rows(environment: pd.DataFrame) -> pd.DataFrame:
    """Per (machine, variant, precision): every setting column, its values as text."""
    fields = setting_fields(environment)
    keys = ["machine", "variant", "precision"]
    rows = []
    for key, group in environment.groupby(keys, sort=True):
        row = dict(zip(keys, key))
        for field in fields:
            seen = list(dict.fromkeys(_display(v) for v in group[field].tolist()))
            seen = [v for v in seen if v is not None]
            row[field.removeprefix(VARIANT_PREFIX)] = ", ".join(seen) if seen else None
        rows.append(row)
    frame = pd.DataFrame(rows)
    return frame.sort_values(keys, key=_in_vocabulary_order, kind="stable").reset_index(drop=True)


def _differs(column: pd.Series) -> bool:
    return column.astype(object).where(column.notna(), "").astype(str).nunique() > 1


def settings_table(environment: pd.DataFrame | None) -> pd.DataFrame:
    """Per (machine, variant, precision): the math and pipeline switches the runs recorded
    that differ between the rows (a variant's `num_workers`, a precision's `amp_dtype`):
    columns follow what the study varied, not a fixed list. With one row, every setting;
    the ones all rows share are `shared_settings`."""
    if environment is None or environment.empty:
        return pd.DataFrame()
    frame = _settings_rows(environment)
    if len(frame) < 2:
        return frame
    keys = ["machine", "variant", "precision"]
    return frame[keys + [c for c in frame.columns if c not in keys and _differs(frame[c])]]


def shared_settings(environment: pd.DataFrame | None) -> dict[str, str]:
    """The settings every (machine, variant, precision) of two or more shares, by name."""
    if environment is None or environment.empty:
        return {}
    frame = _settings_rows(environment)
    if len(frame) < 2:
        return {}
    keys = ["machine", "variant", "precision"]
    return {
        c: frame[c].iloc[0]
        for c in frame.columns
        if c not in keys and not _differs(frame[c]) and frame[c].notna().all()
    }


def _display_bytes(value: object) -> str | None:
    if _display(value) is None:
        return None
    try:
        return f"{float(value) / 1e9:.1f} GB"
    except (TypeError, ValueError):
        return _display(value)


def _display(value: object) -> str | None:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
