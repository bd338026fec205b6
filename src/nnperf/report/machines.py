"""Which machine produced a result, and the merge of results from several machines.

A machine is its environment record's host name plus the name of the device that ran (a GPU
model, or the CPU model for `cpu`). The environment tables of one or more `results/` folders
give every other table a `machine` column (`machine_map`, `attach_machine`), so a laptop's, a
workstation's and a cloud GPU's results sit side by side.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping

import pandas as pd

from nnperf.core import files
from nnperf.core.errors import NnperfError
from nnperf.core.vocab import CONFIG_KEYS
from nnperf.report.aggregate import read_runs
from nnperf.report.format import in_report_order

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

# The record's `cuda` is `torch.version.cuda` and its `cudnn` `torch.backends.cudnn.version()`,
# which a CUDA wheel reports on any host: the CUDA and cuDNN that ran only where a run used the
# GPU, the torch build's elsewhere (shown so, not as the machine's).
BUILD_FIELDS = {"cuda": "CUDA", "cudnn": "cuDNN"}
GPU_DEVICE = "cuda"

# Settings that follow the variant and precision, not the machine: the record's own (what
# torch was set to), then every other toggle of the variant (`variant_<name>` columns).
SETTING_FIELDS = (
    *("tf32", "cudnn_benchmark", "memory_format", "amp_dtype", "grad_scaler"),
    *("compile_mode", "optimizer_impl", "optimizer_impl_resolved", "data_path"),
)
# Variant toggles the environment record already shows under its own name.
RECORDED_TOGGLES = ("channels_last", "compile", "cudnn_benchmark", "optimizer_impl", "data_path")
VARIANT_PREFIX = "variant_"
SETTING_KEYS = ["machine", "variant", "precision"]


def _display(value: object) -> str | None:
    """A recorded value as text (64.0 as `64`), None where missing or blank."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip() or None


def machine_label(hostname: object, device_name: object, device: object = None) -> str:
    """`<device name> (<host>)`: what the report calls a machine."""
    name = _display(device_name) or _display(device) or "unknown device"
    host = _display(hostname)
    return f"{name} ({host})" if host else name


def environment_frame(run_documents: Iterable[Mapping]) -> pd.DataFrame:
    """One row per run JSON: its keys, status, `machine`, the variant's toggles as runs.csv
    carries them and the environment flattened with `_` (`clocks_gpu_sm_mhz`)."""
    rows = []
    for document in run_documents:
        environment = dict(document.get("environment") or {})
        flat = pd.json_normalize(environment, sep="_").to_dict("records")[0] if environment else {}
        # `device` inside the record names the nnperf device; the run key wins if they differ.
        flat.pop("device", None)
        row = {key: document.get(key) for key in (*CONFIG_KEYS, "status")}
        toggles = document.get("variant_settings") or {}
        row.update({VARIANT_PREFIX + name: value for name, value in toggles.items()})
        row["machine"] = machine_label(
            environment.get("hostname"), environment.get("device_name"), document.get("device")
        )
        row.update({f"env_{k}" if k in row else k: v for k, v in flat.items()})
        rows.append(row)
    if not rows:
        return pd.DataFrame(columns=[*CONFIG_KEYS, "status", "machine"])
    frame = pd.DataFrame(rows).sort_values(list(CONFIG_KEYS), key=in_report_order, kind="stable")
    return frame.reset_index(drop=True)


def environment_from_runs(runs: pd.DataFrame) -> pd.DataFrame | None:
    """The machine columns and variant toggles runs.csv carries, for a folder with neither
    environment.csv nor run JSONs (results copied as tables only)."""
    if "device" not in runs.columns or not {"hostname", "device_name"} & set(runs.columns):
        return None
    none = pd.Series(None, index=runs.index)
    cells = zip(runs.get("hostname", none), runs.get("device_name", none), runs["device"])
    frame = runs.assign(machine=[machine_label(*machine) for machine in cells])
    toggles = [c for c in frame.columns if c.startswith(VARIANT_PREFIX)]
    keep = (*CONFIG_KEYS, "status", "machine", *(f for _, f in MACHINE_FIELDS), *toggles)
    return frame[[c for c in dict.fromkeys(keep) if c in frame.columns]]


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
        f"machine(s) -> {os.fspath(out)}"
    )
    return frame


def machine_map(environments: Mapping[str, pd.DataFrame | None]) -> pd.DataFrame:
    """`results_dir, device, machine` for every device of every results folder (whose
    environment table is None or empty: not listed). A device several hosts ran (a cluster
    partition) joins their labels with ` + `; the same label from two folders (one machine
    measured twice) gets the folder added, so the two stay apart in every table and figure.
    """
    rows = [
        (folder, device, " + ".join(sorted(set(group["machine"].dropna().astype(str)))))
        for folder, environment in environments.items()
        if environment is not None and not environment.empty
        for device, group in environment.groupby("device", sort=True)
    ]
    rows = [(folder, device, name or f"{device} ({folder})") for folder, device, name in rows]
    mapping = pd.DataFrame(rows, columns=["results_dir", "device", "machine"])
    clash = mapping.groupby("machine")["results_dir"].transform("nunique") > 1
    mapping.loc[clash, "machine"] += " [" + mapping.loc[clash, "results_dir"] + "]"
    return mapping


def attach_machine(
    frame: pd.DataFrame | None, mapping: pd.DataFrame, results_dir: str
) -> pd.DataFrame | None:
    """`frame` (a table from `results_dir`) with `machine` and `results_dir` columns first;
    rows whose device has no environment record are labelled `<device> (<results_dir>)`."""
    if frame is None:
        return None
    here = mapping[mapping["results_dir"] == results_dir][["device", "machine"]]
    result = frame.drop(columns=["machine", "results_dir"], errors="ignore")
    if "device" in result.columns:
        result = result.merge(here, on="device", how="left")
        unknown = result["device"].astype(str) + f" ({results_dir})"
        result["machine"] = result["machine"].fillna(unknown)
    else:
        result["machine"] = " + ".join(here["machine"]) or results_dir
    first = pd.DataFrame({"machine": result.pop("machine"), "results_dir": results_dir})
    return pd.concat([first, result], axis=1)


def combine(frames: Iterable[pd.DataFrame | None]) -> pd.DataFrame | None:
    """Tables of several folders (with `machine` columns) one under the other; None where no
    folder had the table; a column one folder lacks (an older pipeline) is empty there."""
    present = [frame for frame in frames if frame is not None and not frame.empty]
    return pd.concat(present, ignore_index=True, sort=False) if present else None


def cudnn_text(value: object) -> str | None:
    """cuDNN's CUDNN_VERSION as a version (cudnn_version.h): 91300 -> `9.13.0` (cuDNN 9:
    major x 10000 + minor x 100 + patch), 8902 -> `8.9.2` (cuDNN 8: major x 1000 + ...)."""
    text = _display(value)
    if text is None or not text.isdigit():
        return text
    major, rest = divmod(int(text), 10000 if int(text) >= 90000 else 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _shown(field: str, value: object) -> str | None:
    if field.endswith("_bytes") and _display(value) is not None:
        try:
            return f"{float(value) / 1e9:.1f} GB"
        except (TypeError, ValueError):
            return _display(value)
    return cudnn_text(value) if field == "cudnn" else _display(value)


def _seen(group: pd.DataFrame, field: str) -> list[str]:
    """The distinct values a machine's runs recorded for `field`, as display text."""
    shown = (_shown(field, v) for v in group.get(field, pd.Series(dtype=object)).tolist())
    return list(dict.fromkeys(v for v in shown if v is not None))


def _machine_column(group: pd.DataFrame) -> list[str | None]:
    # Without a device column (not written by nnperf) nothing is known: shown as recorded.
    devices = _seen(group, "device") or [GPU_DEVICE]
    values, build = {}, []
    for _, field in MACHINE_FIELDS:
        seen = _seen(group, field)
        values[field] = ", ".join(seen) or None
        if field in BUILD_FIELDS and GPU_DEVICE not in devices:
            build += [f"{BUILD_FIELDS[field]} {v}" for v in seen]
            values[field] = f"not used ({', '.join(devices)} runs)" if seen else None
    values["torch_build"] = ", ".join(build) or None
    return [values[field] for _, field in MACHINE_FIELDS]


def machine_table(environment: pd.DataFrame | None) -> pd.DataFrame:
    """Fields as rows, one column per machine. A field that differs between a machine's runs
    lists every value (a driver update mid-study is visible, not hidden); a machine whose runs
    all used the CPU reads CUDA and cuDNN "not used", the wheel's go to `torch build`."""
    if environment is None or environment.empty:
        return pd.DataFrame(columns=["Field"])
    columns = {machine: _machine_column(g) for machine, g in environment.groupby("machine")}
    table = pd.DataFrame(columns, index=[label for label, _ in MACHINE_FIELDS])
    return table.dropna(how="all").rename_axis("Field").reset_index()


def _settings_rows(environment: pd.DataFrame) -> pd.DataFrame:
    """Per (machine, variant, precision): every setting the runs recorded (SETTING_FIELDS,
    then each toggle the record does not show already), its values as text."""
    toggles = [c.removeprefix(VARIANT_PREFIX) for c in environment if c.startswith(VARIANT_PREFIX)]
    fields = [f for f in SETTING_FIELDS if f in environment.columns]
    fields += [VARIANT_PREFIX + t for t in toggles if t not in RECORDED_TOGGLES]
    frame = environment.groupby(SETTING_KEYS, sort=True)[fields].agg(
        lambda seen: ", ".join(dict.fromkeys(v for v in map(_display, seen) if v is not None))
        or None
    )
    frame = frame.rename(columns=lambda c: c.removeprefix(VARIANT_PREFIX)).reset_index()
    frame = frame.sort_values(SETTING_KEYS, key=in_report_order, kind="stable")
    return frame.reset_index(drop=True)


def _same(column: pd.Series) -> bool:
    return column.astype(object).where(column.notna(), "").astype(str).nunique() <= 1


def settings_table(environment: pd.DataFrame | None) -> pd.DataFrame:
    """Per (machine, variant, precision): the settings that differ between the rows (a
    variant's `num_workers`, a precision's `amp_dtype`), so columns follow what the study
    varied; with one row, every setting. Those all rows share are `shared_settings`."""
    if environment is None or environment.empty:
        return pd.DataFrame()
    frame = _settings_rows(environment)
    if len(frame) < 2:
        return frame
    varied = [c for c in frame.columns if c not in SETTING_KEYS and not _same(frame[c])]
    return frame[SETTING_KEYS + varied]


def shared_settings(environment: pd.DataFrame | None) -> dict[str, str]:
    """The settings every (machine, variant, precision) of two or more shares, by name."""
    frame = _settings_rows(environment) if environment is not None and not environment.empty else []
    if len(frame) < 2:
        return {}
    return {
        c: frame[c].iloc[0]
        for c in frame.columns
        if c not in SETTING_KEYS and _same(frame[c]) and frame[c].notna().all()
    }
