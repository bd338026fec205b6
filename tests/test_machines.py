"""Machines told apart by their environment record, and results of several machines merged."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from nnperf import machines, results
from nnperf.plots import machines as plot_machines
from nnperf.errors import NnperfError
from report_tables import GPU_BOX, LAPTOP, environment, gpu_folder, laptop_folder

H100 = "NVIDIA H100 80GB HBM3 (gpu01)"
I7 = "Intel(R) Core(TM) i7-1185G7 (laptop)"


def run_document(device, device_name, hostname, rep=0, **env):
    return {
        "status": "ok",
        "device": device,
        "model": "m",
        "precision": "fp32",
        "batch_size": 8,
        "variant": "baseline",
        "rep": rep,
        "environment": environment(device, device_name, hostname, **env),
    }


def test_environment_frame_flattens_the_record_and_labels_the_machine():
    frame = machines.environment_frame([run_document(*GPU_BOX)])
    row = frame.iloc[0]
    assert row["machine"] == H100
    assert row["device"] == "cuda" and row["rep"] == 0
    # Nested fields keep their path: gpu.capability, clocks.gpu_sm_mhz.
    assert row["gpu_capability"] == "9.0"
    assert row["clocks_gpu_sm_mhz"] == "1980"
    assert row["driver"] == "580.95"


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
            run_document("cuda", "NVIDIA A100-SXM4-80GB", "node1", rep=0),
            run_document("cuda", "NVIDIA A100-SXM4-80GB", "node2", rep=1),
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
    assert len(loaded.summary) == 6 + 2
    by_machine = loaded.summary.groupby("machine")["throughput_img_s_median"].max()
    assert by_machine[H100] == 1800 and by_machine[I7] == 260
    # The kernels only exist on the GPU box, and keep its label.
    assert loaded.kernels["machine"].unique().tolist() == [H100]
    assert {c["machine"] for c in loaded.ceilings} == {I7, H100}
    # One complexity document per model, however many folders hold it.
    assert [d["model"] for d in loaded.complexity] == ["resnet18_cifar"]
    assert loaded.sources["summary"] == [
        str(laptop / "tables/summary.csv"),
        str(gpu / "tables/summary.csv"),
    ]
    # Read as recorded: the compute capability stays "9.0", not 9.
    table = machines.machine_table(loaded.environment)
    assert table.set_index("Field").loc["GPU compute capability", H100] == "9.0"
    assert table.set_index("Field").loc["GPU memory", H100] == "85.0 GB"


def test_a_folder_without_environment_csv_uses_its_run_jsons(tmp_path):
    gpu = gpu_folder(tmp_path / "gpu", environment_csv=False)
    loaded = results.load([results.discover(gpu)])
    assert loaded.summary["machine"].unique().tolist() == [H100]
    assert len(loaded.sources["environment"]) == 2 * 3


def test_a_folder_with_tables_only_uses_the_machine_columns_of_runs_csv(tmp_path):
    gpu = gpu_folder(tmp_path / "gpu", environment_csv=False)
    for path in (gpu / "runs").rglob("*.json"):
        path.unlink()
    loaded = results.load([results.discover(gpu)])
    assert loaded.summary["machine"].unique().tolist() == [H100]
    assert loaded.sources["environment"] == [str(gpu / "tables/runs.csv")]


def test_environment_table_has_one_row_per_run_in_the_shared_order(tmp_path):
    gpu = gpu_folder(tmp_path / "gpu", environment_csv=False)
    out = tmp_path / "environment.csv"
    machines.write_environment_table(sorted((gpu / "runs").rglob("rep*.json")), out)
    frame = pd.read_csv(out, dtype=str)
    assert len(frame) == 6
    assert set(frame["machine"]) == {H100}
    # fp32 before bf16 (nnperf.vocab), not alphabetically.
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
        results.read_table(path)


def test_comparison_figure_has_one_colour_per_machine(tmp_path):
    laptop = laptop_folder(tmp_path / "laptop")
    gpu = gpu_folder(tmp_path / "gpu")
    loaded = results.load([results.discover(laptop), results.discover(gpu)])
    grid = plot_machines.throughput_by_machine(loaded.summary, loaded.runs)
    try:
        labels = [t.get_text() for t in grid.legend.get_texts()]
        assert labels == [I7, H100]
        # H100 median 1800 vs laptop 260: under 20x apart, so the axis stays linear.
        assert grid.axes.flat[0].get_yscale() == "linear"
    finally:
        plt.close(grid.figure)


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
