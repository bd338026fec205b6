"""Which machine produced a result, and the merge of results from several machines.

A machine is told apart by its environment record (the `environment` of every run JSON):
the host name plus the name of the device that ran (a GPU model, or the CPU model for
`cpu`). `environment_frame` flattens those records into a tidy table (one row per run, the
file `results/tables/environment.csv`); `machine_map` turns the environment tables of one
or more `results/` folders into a `(results_dir, device) -> machine` mapping, and
`attach_machine` / `combine` give every other table (summary, runs, roofline points,
kernels) a `machine` column so that results from a laptop, a workstation and a cloud GPU
sit side by side.

All functions take data and return data; reading the folders is `nnperf.results`' job.
It is not the place for the report text (`nnperf.report`).
"""

from __future__ import annotations

from typing import Iterable, Mapping

import pandas as pd

from nnperf.vocab import CONFIG_KEYS

RUN_KEYS = CONFIG_KEYS + ("rep",)

# Fields of the environment record shown in the report, one row each, with the label a
# reader knows them by. Columns are the flattened names `environment_frame` writes.
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

# Settings recorded per run that follow the variant and precision, not the machine.
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
    """One row per run JSON: its config keys, rep, status, `machine` and flat environment.

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
        row["machine"] = machine_label(
            environment.get("hostname"), environment.get("device_name"), document.get("device")
        )
        row.update({f"env_{k}" if k in row else k: v for k, v in flat.items()})
        rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=[*RUN_KEYS, "status", "machine"])
    return frame.sort_values(list(RUN_KEYS), kind="stable").reset_index(drop=True)


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


def machine_table(environment: pd.DataFrame | None) -> pd.DataFrame:
    """Fields as rows, one column per machine: what the environment section shows.

    A field that differs between a machine's runs lists every value seen, so a driver
    update in the middle of a study is visible rather than hidden.
    """
    if environment is None or environment.empty:
        return pd.DataFrame(columns=["Field"])
    columns = {}
    for machine, group in environment.groupby("machine", sort=True):
        values = []
        for _, field in MACHINE_FIELDS:
            if field not in group.columns:
                values.append(None)
                continue
            seen = [
                _display_bytes(v) if field.endswith("_bytes") else _display(v)
                for v in group[field].tolist()
            ]
            seen = list(dict.fromkeys(v for v in seen if v is not None))
            values.append(", ".join(seen) if seen else None)
        columns[machine] = values
    table = pd.DataFrame(columns, index=[label for label, _ in MACHINE_FIELDS])
    table = table.dropna(how="all")
    table.index.name = "Field"
    return table.reset_index()


def settings_table(environment: pd.DataFrame | None) -> pd.DataFrame:
    """Per (machine, variant, precision): the math and pipeline switches the runs recorded."""
    if environment is None or environment.empty:
        return pd.DataFrame()
    fields = [f for f in SETTING_FIELDS if f in environment.columns]
    keys = ["machine", "variant", "precision"]
    rows = []
    for key, group in environment.groupby(keys, sort=True):
        row = dict(zip(keys, key))
        for field in fields:
            seen = list(dict.fromkeys(_display(v) for v in group[field].tolist()))
            seen = [v for v in seen if v is not None]
            row[field] = ", ".join(seen) if seen else None
        rows.append(row)
    return pd.DataFrame(rows)


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


def plot_throughput_by_machine(summary: pd.DataFrame, runs: pd.DataFrame | None = None):
    """Seaborn bars of median throughput per configuration, one colour per machine.

    From the per-rep runs when given (bars: median of the reps, whiskers: their
    interquartile range, the same statistics summary.csv holds); from summary.csv medians
    otherwise. One panel per model; a log axis when machines differ by more than 20x, as a
    laptop CPU and a datacenter GPU do. Returns the seaborn FacetGrid.
    """
    import matplotlib

    matplotlib.use("Agg")
    import seaborn as sns

    if runs is not None and "throughput_img_s" in runs.columns:
        data = runs[runs["status"].astype(str) == "ok"].copy() if "status" in runs else runs.copy()
        value, errorbar = "throughput_img_s", ("pi", 50)
    else:
        data = summary.copy()
        value, errorbar = "throughput_img_s_median", None
    data = data.dropna(subset=[value])
    if data.empty:
        raise ValueError("no successful runs to plot")
    data["configuration"] = (
        data["precision"].astype(str)
        + " bs"
        + data["batch_size"].astype(int).astype(str)
        + " "
        + data["variant"].astype(str)
    )
    order = sorted(data["configuration"].unique(), key=_config_sort_key)
    grid = sns.catplot(
        data=data,
        kind="bar",
        x="configuration",
        y=value,
        hue="machine",
        col="model",
        col_wrap=min(2, data["model"].nunique()),
        order=order,
        estimator="median",
        errorbar=errorbar,
        sharey=False,
        height=4,
        aspect=1.6,
        legend_out=False,
    )
    spread = data.groupby("machine")[value].median()
    if len(spread) > 1 and spread.max() > 20 * spread.min():
        grid.set(yscale="log")
    grid.set_axis_labels("precision, batch size, variant", "throughput (images/s)")
    grid.set_titles("{col_name}")
    for axis in grid.axes.flat:
        axis.tick_params(axis="x", rotation=45)
        for label in axis.get_xticklabels():
            label.set_horizontalalignment("right")
    grid.figure.suptitle(
        (
            "Training throughput per machine (median of reps; whiskers: IQR)"
            if errorbar
            else "Training throughput per machine (median of reps)"
        ),
        y=1.02,
    )
    grid.figure.tight_layout()
    # Machine names are long: the legend sits right of the panels, outside them (saving with
    # bbox_inches="tight" keeps it in the image).
    sns.move_legend(grid, "upper left", bbox_to_anchor=(1.0, 0.95), frameon=False)
    return grid


def _config_sort_key(label: str):
    precision, batch, variant = label.split(" ", 2)
    order = {"fp32": 0, "tf32": 1, "fp16": 2, "bf16": 3}
    return (order.get(precision, 9), int(batch.removeprefix("bs")), variant != "baseline", variant)
