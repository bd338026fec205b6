"""Environment record: parsers on captured text, the CPU record on this machine, git commit."""

from __future__ import annotations

import subprocess

from nnperf.core.environment import (
    collect_environment,
    cpu_record,
    git_commit,
    parse_cpuinfo,
    parse_nvidia_smi_csv,
)
from nnperf.core.variant import parse_variant_settings

# Shape of `nvidia-smi --query-gpu=<NVIDIA_SMI_FIELDS> --format=csv,noheader,nounits` on an
# H100 node (fields in the order of NVIDIA_SMI_FIELDS; ", " separated, "[N/A]" when missing).
NVIDIA_SMI_TWO_GPUS = (
    "0, NVIDIA H100 80GB HBM3, GPU-5b3a0c2e-1111-2222-3333-444455556666, 00000000:18:00.0, "
    "550.54.15, P0, Enabled, 1980, 2619, 1980, 2619, 1755, 2619, 700.00, 34, 81559\n"
    "1, NVIDIA H100 80GB HBM3, GPU-7c4b1d3f-aaaa-bbbb-cccc-ddddeeeeffff, 00000000:2A:00.0, "
    "550.54.15, P0, Enabled, 345, 2619, 1980, 2619, [N/A], [Not Supported], 700.00, 31, 81559\n"
)


def test_parse_nvidia_smi_rows():
    rows = parse_nvidia_smi_csv(NVIDIA_SMI_TWO_GPUS)
    assert len(rows) == 2
    assert rows[0]["name"] == "NVIDIA H100 80GB HBM3"
    assert rows[0]["uuid"] == "GPU-5b3a0c2e-1111-2222-3333-444455556666"
    assert rows[0]["clocks.sm"] == "1980" and rows[0]["driver_version"] == "550.54.15"
    assert rows[1]["clocks.applications.graphics"] is None
    assert rows[1]["clocks.applications.memory"] is None
    assert parse_nvidia_smi_csv("") == []
    assert parse_nvidia_smi_csv("0, too, few\n") == []  # misaligned rows are dropped


def test_parse_cpuinfo():
    text = (
        "processor\t: 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\ncpu MHz\t\t: 2400.000\n"
        "\nprocessor\t: 1\nmodel name\t: AMD EPYC 9654 96-Core Processor\ncpu MHz\t\t: 3700.5\n"
    )
    parsed = parse_cpuinfo(text)
    assert parsed == {"cpu_model": "AMD EPYC 9654 96-Core Processor", "cpu_mhz": [2400.0, 3700.5]}


def test_cpu_record_on_this_machine():
    record = cpu_record()
    assert record["cpu_model"]
    assert record["cpu_count_logical"] >= 1
    if record["cpu_mhz"] is not None:
        assert record["cpu_mhz"]["min"] <= record["cpu_mhz"]["mean"] <= record["cpu_mhz"]["max"]


def test_git_commit_of_a_real_repository_and_of_a_plain_folder(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "Snakefile").write_text("rule all:\n")
    subprocess.run([*git, "add", "Snakefile"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    head = subprocess.run(
        [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert git_commit(repo) == {"git_commit": head, "git_dirty": False}
    (repo / "Snakefile").write_text("rule all:\n    input: []\n")
    assert git_commit(repo) == {"git_commit": head, "git_dirty": True}
    plain = tmp_path / "plain"
    plain.mkdir()
    assert git_commit(plain) == {"git_commit": None, "git_dirty": None}


def test_collect_environment_cpu_with_slurm_variables(monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURMD_NODENAME", "node07")
    settings = parse_variant_settings(
        {"channels_last": True, "compile": "default", "optimizer_impl": "fused"}
    )
    record = collect_environment(
        device="cpu",
        precision="bf16",
        settings=settings,
        optimizer_impl_resolved="fused",
        workflow_dir=tmp_path,
    )
    assert record["slurm"] == {"job_id": "4242", "node": "node07"}
    assert record["memory_format"] == "channels_last"
    assert record["compile_mode"] == "default"
    assert record["amp_dtype"] == "bfloat16"
    assert record["optimizer_impl"] == "fused"
    assert record["git_commit"] is None
    assert record["hostname"] and record["torch"] and record["python"]
    assert record["clocks"]["gpu_sm_mhz"] is None
