"""Machines told apart by their environment record, and results of several machines merged.

The results folders are written the way the pipeline writes them: one run document per
configuration (`test_aggregate.run_document`, the runner's format) under the layout's path,
then runs.csv, windows.csv and summary.csv from `nnperf.report.aggregate.write_tables` and
environment.csv from `nnperf.report.machines.write_environment_table`.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.collections import PathCollection

from nnperf.core import files, layout
from nnperf.core.contract import TablesRequest
from nnperf.core.errors import NnperfError
from nnperf.core.vocab import CONFIG_KEYS
from nnperf.report import aggregate, machines, results
from nnperf.report.plots import machines as plot_machines
from test_aggregate import run_document as timed_run_document

LAPTOP = ("cpu", "Intel(R) Core(TM) i7-1185G7", "laptop")
GPU_BOX = ("cuda", "NVIDIA H100 80GB HBM3", "gpu01")
H100 = "NVIDIA H100 80GB HBM3 (gpu01)"
I7 = "Intel(R) Core(TM) i7-1185G7 (laptop)"
MODEL = "resnet18_cifar"
DATASET = "synthetic"


def environment(device: str, device_name: str, hostname: str, **extra) -> dict:
    """An environment record with the fields nnperf.core.environment.collect_environment writes."""
    cuda = device == "cuda"
    record = {
        "device": device,
        "device_name": device_name,
        "driver": "580.95" if cuda else None,
        "cuda": "13.0",
        "cudnn": 91300,
        "torch": "2.14.1",
        "python": "3.11.2",
        "cpu_model": "AMD EPYC 7B13",
        "cpu_count_logical": 2,
        "cpu_threads": 2,
        "clocks": {"cpu_mhz": {"mean": 2450.0}, "gpu_sm_mhz": "1980" if cuda else None},
        "tf32": False,
        "memory_format": "contiguous",
        "data_path": "dataloader",
        "gpu": (
            {
                "name": device_name,
                "uuid": "GPU-1234",
                "capability": "9.0",
                "total_memory_bytes": 85_000_000_000,
            }
            if cuda
            else None
        ),
        "hostname": hostname,
        "slurm": None,
        "git_commit": "abc123",
        "git_dirty": False,
    }
    record.update(extra)
    return record


# (precision, batch size, variant, throughput of every window or a status): every window of a
# measured configuration has the same throughput, so its mean is exactly that number.
LAPTOP_CONFIGS = [
    ("fp32", 16, "baseline", 100.0),
    ("fp32", 64, "baseline", 200.0),
    ("bf16", 64, "baseline", 150.0),
    ("fp32", 64, "tuned", 260.0),
    ("fp32", 128, "baseline", "oom"),
]
GPU_CONFIGS = [
    ("fp32", 64, "baseline", 1000.0),
    ("bf16", 64, "baseline", 1800.0),
    ("bf16", 512, "baseline", "over_budget"),
]


def machine_documents(machine, configs) -> list[dict]:
    """One run document per configuration, measured one after another on `machine`."""
    device, device_name, hostname = machine
    documents, start = [], 1_700_000_000.0
    for precision, batch_size, variant, outcome in configs:
        measured = not isinstance(outcome, str)
        document = timed_run_document(
            precision,
            batch_size,
            variant,
            device=device,
            model=MODEL,
            start=start,
            status="ok" if measured else outcome,
            windows=((outcome,) * 3,) * 2 if measured else (),
        )
        document["environment"] = environment(device, device_name, hostname)
        documents.append(document)
        start = document["ended_at_unix"] + 1.0
    return documents


def write_folder(root: Path, machine, configs, *, environment_csv: bool = True) -> Path:
    """A results folder as the pipeline leaves it, for the machine comparison."""
    paths = []
    for document in machine_documents(machine, configs):
        keys = {
            key: document[key] for key in ("device", "model", "precision", "batch_size", "variant")
        }
        path = root / layout.path("run", dataset=DATASET, **keys).removeprefix("results/")
        files.write_json(path, {k: v for k, v in document.items() if k != "schema_version"})
        paths.append(path)
    table = {
        name: root / layout.path("table", dataset=DATASET, name=name).removeprefix("results/")
        for name in ("runs", "windows", "summary", "environment")
    }
    aggregate.write_tables(
        TablesRequest(), paths, table["runs"], table["windows"], table["summary"]
    )
    if environment_csv:
        machines.write_environment_table(paths, table["environment"])
    device = machine[0]
    files.write_json(
        root / layout.path("ceilings", device=device).removeprefix("results/"),
        {"device": device, "device_name": machine[1], "measured": {}},
    )
    files.write_json(
        root / layout.path("complexity", dataset=DATASET, model=MODEL).removeprefix("results/"),
        {"model": MODEL, "dataset": "synthetic", "input_shape": [3, 32, 32]},
    )
    return root


def laptop_folder(root: Path, **kwargs) -> Path:
    return write_folder(root, LAPTOP, LAPTOP_CONFIGS, **kwargs)


def gpu_folder(root: Path, **kwargs) -> Path:
    return write_folder(root, GPU_BOX, GPU_CONFIGS, **kwargs)


def run_document(device, device_name, hostname, precision="fp32", **env):
    return {
        "status": "ok",
        "device": device,
        "model": "m",
        "precision": precision,
        "batch_size": 8,
        "variant": "baseline",
        "environment": environment(device, device_name, hostname, **env),
    }


def test_environment_frame_flattens_the_record_and_labels_the_machine():
    frame = machines.environment_frame([run_document(*GPU_BOX)])
    row = frame.iloc[0]
    assert row["machine"] == H100
    # One row per configuration: its keys, no repetition index.
    assert list(frame.columns[:7]) == [*CONFIG_KEYS, "status", "machine"]
    assert "rep" not in frame.columns and row["device"] == "cuda"
    # Nested fields keep their path: gpu.capability, clocks.gpu_sm_mhz.
    assert row["gpu_capability"] == "9.0"
    assert row["clocks_gpu_sm_mhz"] == "1980"
    assert row["driver"] == "580.95"


def _machine_rows(documents, tmp_path=None) -> pd.DataFrame:
    """The report's machine table (fields as rows) for run documents; through
    environment.csv and back (read as text, as nnperf.report.results reads it) when `tmp_path`."""
    frame = machines.environment_frame(documents)
    if tmp_path is not None:
        files.write_csv(tmp_path / "environment.csv", frame)
        frame = pd.read_csv(tmp_path / "environment.csv", dtype=str)
    return machines.machine_table(frame).set_index("Field")


@pytest.mark.parametrize("through_csv", [False, True])
def test_a_cpu_machine_shows_its_torch_build_not_a_cuda_runtime(tmp_path, through_csv):
    # Both machines ran a CUDA 13.0 / cuDNN 9.13 torch wheel: the record's `cuda` and
    # `cudnn` are that build's on any host (envinfo records torch.version.cuda).
    documents = [
        *machine_documents(LAPTOP, LAPTOP_CONFIGS),
        *machine_documents(GPU_BOX, GPU_CONFIGS),
    ]
    table = _machine_rows(documents, tmp_path if through_csv else None)
    laptop, gpu = table[I7], table[H100]
    assert laptop["CUDA"] == laptop["cuDNN"] == "not used (cpu runs)"
    assert laptop["torch build"] == "CUDA 13.0, cuDNN 9.13.0" and pd.isna(laptop["Driver"])
    # The GPU box ran them: its CUDA, cuDNN and driver are the machine's.
    assert (gpu["CUDA"], gpu["cuDNN"], gpu["Driver"]) == ("13.0", "9.13.0", "580.95")
    assert pd.isna(gpu["torch build"])


def test_a_cpu_only_study_presents_no_cuda_version_as_the_machine_s():
    rows = _machine_rows(machine_documents(LAPTOP, LAPTOP_CONFIGS))[I7]
    assert [field for field, value in rows.items() if "13.0" in str(value)] == ["torch build"]
    assert "Driver" not in rows.index and rows["CUDA"] == "not used (cpu runs)"
    # A CPU-only torch build has no CUDA at all: no CUDA, cuDNN or build row.
    documents = machine_documents(LAPTOP, LAPTOP_CONFIGS)
    for document in documents:
        document["environment"].update(cuda=None, cudnn=None)
    rows = _machine_rows(documents)[I7]
    assert not {"CUDA", "cuDNN", "torch build"} & set(rows.index)


@pytest.mark.parametrize(
    "recorded,shown",
    [(91300, "9.13.0"), ("91300", "9.13.0"), (90100, "9.1.0"), (8902, "8.9.2"), (None, None)],
)
def test_cudnn_version_numbers_read_as_versions(recorded, shown):
    assert machines.cudnn_text(recorded) == shown


def test_machine_label_falls_back_to_the_device():
    assert machines.machine_label("host", None, "cpu") == "cpu (host)"
    assert machines.machine_label(None, "Apple M2 (MPS)") == "Apple M2 (MPS)"


def test_same_machine_in_two_folders_is_told_apart_by_folder():
    env = machines.environment_frame([run_document(*LAPTOP)])
    mapping = machines.machine_map({"a/results": env, "b/results": env})
    assert sorted(mapping["machine"]) == [f"{I7} [a/results]", f"{I7} [b/results]"]


def test_a_cluster_device_with_two_hosts_lists_both():
    env = machines.environment_frame(
        [
            run_document("cuda", "NVIDIA A100-SXM4-80GB", "node1", precision="fp32"),
            run_document("cuda", "NVIDIA A100-SXM4-80GB", "node2", precision="bf16"),
        ]
    )
    mapping = machines.machine_map({"results": env})
    assert mapping["machine"].tolist() == [
        "NVIDIA A100-SXM4-80GB (node1) + NVIDIA A100-SXM4-80GB (node2)"
    ]


def test_attach_and_combine_give_every_row_its_machine():
    mapping = pd.DataFrame(
        [
            {"results_dir": "laptop", "device": "cpu", "machine": I7},
            {"results_dir": "gpu", "device": "cuda", "machine": H100},
        ]
    )
    laptop = machines.attach_machine(
        pd.DataFrame({"device": ["cpu", "mps"], "x": [1, 2]}), mapping, "laptop"
    )
    gpu = machines.attach_machine(pd.DataFrame({"device": ["cuda"], "x": [3]}), mapping, "gpu")
    merged = machines.combine([laptop, None, gpu])
    assert merged.columns[:2].tolist() == ["machine", "results_dir"]
    # mps has no environment record in the laptop folder: named after device and folder.
    assert merged["machine"].tolist() == [I7, "mps (laptop)", H100]
    assert merged["x"].tolist() == [1, 2, 3]
    assert machines.combine([None, None]) is None


def test_two_results_folders_merge_into_tables_with_a_machine_column(tmp_path):
    laptop = laptop_folder(tmp_path / "laptop")
    gpu = gpu_folder(tmp_path / "gpu")
    loaded = results.load([results.discover(laptop), results.discover(gpu)])
    assert sorted(loaded.summary["machine"].unique()) == [I7, H100]
    assert len(loaded.summary) == len(LAPTOP_CONFIGS) + len(GPU_CONFIGS)
    by_machine = loaded.summary.groupby("machine")["throughput_img_s_mean"].max()
    assert by_machine[H100] == pytest.approx(1800) and by_machine[I7] == pytest.approx(260)
    assert set(loaded.summary["n_processes"]) == {0, 2}
    # runs.csv: one row per worker process (two per measured configuration, one otherwise).
    assert loaded.runs.groupby("machine").size().to_dict() == {I7: 4 * 2 + 1, H100: 2 * 2 + 1}
    assert {c["machine"] for c in loaded.ceilings} == {I7, H100}
    # One complexity document per model, however many folders hold it.
    assert [d["model"] for d in loaded.complexity] == [MODEL]
    assert loaded.sources["summary"] == [
        str(laptop / "tables/synthetic/summary.csv"),
        str(gpu / "tables/synthetic/summary.csv"),
    ]
    # Read as recorded: the compute capability stays "9.0", not 9.
    table = machines.machine_table(loaded.environment)
    assert table.set_index("Field").loc["GPU compute capability", H100] == "9.0"
    assert table.set_index("Field").loc["GPU memory", H100] == "85.0 GB"


def test_a_groups_folder_is_not_read_as_runs(tmp_path):
    # The interleaving job's folder holds copies of its members' run JSONs and the
    # comparisons; a wildcard over the run path matches it ("groups" as a precision).
    gpu = gpu_folder(tmp_path / "gpu", environment_csv=False)
    runs = sorted((gpu / "runs").rglob("*.json"))
    group = runs[0].parents[2] / "groups" / "bs256"
    group.mkdir(parents=True)
    (group / "comparisons.json").write_text('{"kind": "comparisons"}', encoding="utf-8")
    (group / "fp32_baseline.json").write_bytes(runs[0].read_bytes())
    assert results.discover(gpu).run_jsons == runs
    loaded = results.load([results.discover(gpu)])
    assert len(loaded.sources["environment"]) == len(GPU_CONFIGS)


def test_a_folder_without_environment_csv_uses_its_run_jsons(tmp_path):
    gpu = gpu_folder(tmp_path / "gpu", environment_csv=False)
    loaded = results.load([results.discover(gpu)])
    assert loaded.summary["machine"].unique().tolist() == [H100]
    # One run JSON per configuration.
    assert len(loaded.sources["environment"]) == len(GPU_CONFIGS)


def test_a_folder_with_tables_only_uses_the_machine_columns_of_runs_csv(tmp_path):
    gpu = gpu_folder(tmp_path / "gpu", environment_csv=False)
    for path in (gpu / "runs").rglob("*.json"):
        path.unlink()
    loaded = results.load([results.discover(gpu)])
    assert loaded.summary["machine"].unique().tolist() == [H100]
    assert loaded.sources["environment"] == [str(gpu / "tables/synthetic/runs.csv")]


def test_environment_table_has_one_row_per_configuration_in_the_shared_order(tmp_path, capsys):
    gpu = gpu_folder(tmp_path / "gpu", environment_csv=False)
    out = tmp_path / "environment.csv"
    machines.write_environment_table(sorted((gpu / "runs").rglob("*.json")), out)
    assert f"environment table: 3 configurations on 1 machine(s) -> {out}" in (
        capsys.readouterr().out
    )
    frame = pd.read_csv(out, dtype=str)
    assert len(frame) == len(GPU_CONFIGS)
    assert set(frame["machine"]) == {H100}
    assert frame["status"].tolist() == ["ok", "ok", "over_budget"]
    # fp32 before bf16 (nnperf.core.vocab), not alphabetically.
    assert list(dict.fromkeys(frame["precision"])) == ["fp32", "bf16"]
    settings = machines.settings_table(frame)
    assert settings[["variant", "precision"]].values.tolist() == [
        ["baseline", "fp32"],
        ["baseline", "bf16"],
    ]
    with pytest.raises(NnperfError, match="no run JSON files given"):
        machines.write_environment_table([], out)


def test_missing_results_folder_is_one_clear_line(tmp_path):
    with pytest.raises(NnperfError, match=r"results folder '.*nowhere' does not exist"):
        results.discover(tmp_path / "nowhere")


def test_unreadable_table_names_the_file(tmp_path):
    path = tmp_path / "summary.csv"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(NnperfError, match="summary.csv: not a readable CSV table"):
        files.read_table(path)


def _rounded(values) -> list[float]:
    return sorted(round(float(v), 6) for v in values)


def test_comparison_figure_shows_the_mean_and_its_interval_per_machine(tmp_path):
    laptop = laptop_folder(tmp_path / "laptop")
    gpu = gpu_folder(tmp_path / "gpu")
    loaded = results.load([results.discover(laptop), results.discover(gpu)])
    grid = plot_machines.throughput_by_machine(loaded.summary, loaded.runs)
    try:
        labels = [t.get_text() for t in grid.legend.get_texts()]
        assert labels == [I7, H100]
        (ax,) = grid.axes.flat
        # H100 1800 vs laptop 260 at most: under 20x apart, so the axis stays linear.
        assert ax.get_yscale() == "linear"
        measured = loaded.summary[loaded.summary["status"] == "ok"]
        # One bar per measured configuration and machine, as high as the headline mean...
        heights = [p.get_height() for p in ax.patches if p.get_height() > 0]
        assert _rounded(heights) == _rounded(measured["throughput_img_s_mean"])
        # ...with a whisker from its CI low to its CI high.
        whiskers = [
            (round(min(line.get_ydata()), 6), round(max(line.get_ydata()), 6))
            for line in ax.lines
            if len(line.get_xdata()) == 2 and line.get_xdata()[0] == line.get_xdata()[1]
        ]
        assert sorted(whiskers) == sorted(
            zip(
                (round(v, 6) for v in measured["throughput_img_s_ci95_low"]),
                (round(v, 6) for v in measured["throughput_img_s_ci95_high"]),
            )
        )
        # Every measured worker process is a point on its bar.
        points = [
            y
            for collection in ax.collections
            if isinstance(collection, PathCollection)
            for _, y in collection.get_offsets()
        ]
        processes = loaded.runs[loaded.runs["status"] == "ok"]["throughput_img_s"]
        assert _rounded(points) == _rounded(processes)
        assert "95% CI" in grid.figure.get_suptitle()
    finally:
        plt.close(grid.figure)


def test_comparison_figure_uses_a_log_axis_for_far_apart_machines():
    summary = pd.DataFrame(
        [
            {
                "machine": name,
                "model": "m",
                "precision": "fp32",
                "batch_size": 8,
                "variant": "baseline",
                "status": "ok",
                "throughput_img_s_mean": mean,
                "throughput_img_s_ci95_low": None,
                "throughput_img_s_ci95_high": None,
            }
            for name, mean in (("slow", 10.0), ("fast", 500.0))
        ]
    )
    grid = plot_machines.throughput_by_machine(summary)
    try:
        (ax,) = grid.axes.flat
        assert ax.get_yscale() == "log"
        assert _rounded(p.get_height() for p in ax.patches if p.get_height() > 0) == [10.0, 500.0]
    finally:
        plt.close(grid.figure)


def test_comparison_figure_refuses_tables_without_a_number():
    oom = pd.DataFrame(
        [
            {
                "machine": "a",
                "model": "m",
                "precision": "fp32",
                "batch_size": 8,
                "variant": "baseline",
                "status": "oom",
                "throughput_img_s_mean": None,
            }
        ]
    )
    with pytest.raises(NnperfError, match="no successful runs in any results folder"):
        plot_machines.throughput_by_machine(oom)
    with pytest.raises(NnperfError, match=r"^summary table has no throughput_img_s_mean column"):
        plot_machines.throughput_by_machine(oom.drop(columns="throughput_img_s_mean"))


def test_configurations_are_ordered_on_their_key_columns():
    rows = [
        ("bf16", 8, "baseline"),
        ("fp32", 64, "baseline"),
        ("fp32", 8, "tuned"),
        ("fp32", 8, "baseline"),
        ("tf32", 128, "a_variant"),
    ]
    frame = pd.DataFrame(rows, columns=["precision", "batch_size", "variant"])
    ordered = plot_machines.configuration_order(frame)
    # Precision in the shared order, batch size as a number (8 before 64, which text would
    # not give), the reference variant before the others.
    assert ordered["configuration"].tolist() == [
        "fp32 bs8 baseline",
        "fp32 bs8 tuned",
        "fp32 bs64 baseline",
        "tf32 bs128 a_variant",
        "bf16 bs8 baseline",
    ]
