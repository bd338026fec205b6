"""Tests for the ncu-command and ncu-kernels verbs and the library behind them.

`ncu` cannot exist here, so `fake_ncu` writes a stand-in on PATH that follows the real CLI's
interface: `--version` prints the banner shape of ncu, `-o STEM ... target` runs the target for
real and writes STEM.ncu-rep, `--import X --csv --page raw` prints a raw-page export (a real H100
export from tests/data/ncu/h100, or a hand-made one). Everything else (subprocesses, files,
parsing) is real.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

import pandas as pd
import pytest

from h100_exports import EXPORTS
from nnperf.cli import build_parser, main
from nnperf.core import machinelock
from nnperf.core.contract import (
    DatasetRequest,
    DatasetSettings,
    NcuSettings,
    ProfileStepRequest,
    RunRequest,
    SyntheticData,
    TrainingSettings,
    write_request,
)
from nnperf.core.files import read_json, write_json
from nnperf.ncu import kernels
from nnperf.ncu import command as profiling
from nnperf.ncu import metrics as ncu
from nnperf.workload import datasets as data

DATA = Path(__file__).parents[1] / "data" / "ncu"
REAL = EXPORTS["bf16_bs256_tuned"]
# The configuration the real H100 export was profiled for.
H100_KEYS = REAL.config

FAKE_NCU = """#!{python}
import gzip, json, os, pathlib, subprocess, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler")
    print("Copyright (c) 2018-2024 NVIDIA Corporation")
    print("Version 2024.3.2.0 (build 34861637) (public-release)")
    sys.exit(0)
if "--import" in args:
    export = pathlib.Path(os.environ["FAKE_NCU_EXPORT"])
    raw = gzip.decompress(export.read_bytes()) if export.suffix == ".gz" else export.read_bytes()
    sys.stdout.write(raw.decode("utf-8"))
    sys.exit(int(os.environ.get("FAKE_NCU_EXIT", "0")))
pathlib.Path(os.environ["FAKE_NCU_LOG"]).write_text(json.dumps(args))
stem_at = args.index("-o") + 1
target = args[stem_at + 1:]
rc = subprocess.call(target)
pathlib.Path(args[stem_at] + ".ncu-rep").write_bytes(b"fake report")
sys.exit(rc)
"""


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "ncu"
    script.write_text(FAKE_NCU.format(python=sys.executable))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NCU_LOG", str(tmp_path / "ncu_argv.json"))
    monkeypatch.setenv("FAKE_NCU_EXPORT", str(REAL.path))
    return tmp_path


def _one_line_error(capsys, verb: str) -> str:
    prefix = f"nnperf {verb}: error: "
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith(prefix)]
    assert len(errors) == 1, errors
    return errors[0][len(prefix) :]


def test_profile_dry_run_prints_the_command(capsys):
    rc = main(
        [
            "ncu-command",
            "profile",
            "--report",
            "r/baseline.ncu-rep",
            "--arch",
            "ampere",
            "--clock-control",
            "none",
            "--dry-run",
            "--",
            "nnperf",
            "step",
            "--batch-size",
            "8",
        ]
    )
    assert rc == 0
    argv = shlex.split(capsys.readouterr().out)
    assert argv == ncu.profile_command(
        ["nnperf", "step", "--batch-size", "8"],
        "r/baseline.ncu-rep",
        ncu.metric_set("ampere").metrics(),
        clock_control="none",
    )


def test_export_dry_run(capsys):
    assert (
        main(["ncu-command", "export", "--report", "a.ncu-rep", "--csv", "a.csv", "--dry-run"]) == 0
    )
    assert capsys.readouterr().out.strip() == "ncu --import a.ncu-rep --csv --page raw"


@pytest.mark.parametrize("mode", ["profile", "export"])
def test_missing_ncu_is_one_clear_line(capsys, tmp_path, mode):
    args = (
        ["profile", "--report", str(tmp_path / "r.ncu-rep"), "--", "true"]
        if mode == "profile"
        else ["export", "--report", str(tmp_path / "r.ncu-rep"), "--csv", str(tmp_path / "r.csv")]
    )
    rc = main(
        ["ncu-command", *args, "--ncu", "/nonexistent/ncu"]
        if mode == "export"
        else ["ncu-command", "profile", "--ncu", "/nonexistent/ncu", *args[1:]]
    )
    assert rc == 2
    assert _one_line_error(capsys, "ncu-command") == (
        "ncu executable '/nonexistent/ncu' not found on PATH; install Nsight Compute (CUDA "
        "toolkit) or set ncu.enabled: false in the config"
    )


def test_profile_runs_the_target_under_ncu_and_records_settings(fake_ncu):
    profiles = fake_ncu / "results/profiles/cuda/resnet18/bf16/bs256"
    report = profiles / "baseline.ncu-rep"
    marker = fake_ncu / "target_ran.txt"
    target = [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('stepped')"]
    rc = main(
        [
            "ncu-command",
            "profile",
            "--report",
            str(report),
            "--arch",
            "9.0",
            "--clock-control",
            "none",
            "--",
            *target,
        ]
    )
    assert rc == 0
    assert marker.read_text() == "stepped"
    assert report.read_bytes() == b"fake report"
    argv = json.loads((fake_ncu / "ncu_argv.json").read_text())
    assert argv[argv.index("--metrics") + 1].split(",") == ncu.metric_set("hopper").metrics()
    assert argv[argv.index("-o") + 1] == str(profiles / "baseline")
    meta = read_json(profiles / "baseline.ncu.json")
    assert meta["arch"] == "hopper"
    assert meta["clock_control"] == "none" and meta["replay_mode"] == "kernel"
    assert meta["nvtx_include"] == ["nnperf_step", "nnperf_calibration_gemm"]
    assert meta["ncu_version"] == "Version 2024.3.2.0 (build 34861637) (public-release)"
    assert meta["target"] == target
    assert 0 < meta["wall_time_s"] < 120


def test_profile_failure_of_the_target_is_an_error(fake_ncu, capsys):
    rc = main(
        [
            "ncu-command",
            "profile",
            "--report",
            str(fake_ncu / "r.ncu-rep"),
            "--arch",
            "hopper",
            "--",
            sys.executable,
            "-c",
            "raise SystemExit(3)",
        ]
    )
    assert rc == 2
    # Beside the machine's measurement lock's lines (held and released: nnperf.core.machinelock).
    lines = capsys.readouterr().err.splitlines()
    locks = [line for line in lines if machinelock.HELD in line or machinelock.RELEASED in line]
    assert len(locks) == 2 and locks[0].startswith("nnperf ncu_profile: ")
    captured = [line for line in lines if line not in locks]
    assert (
        captured[0].startswith("nnperf ncu-command: ")
        and "--nvtx-include nnperf_step" in captured[0]
    )
    assert captured[-1].startswith(
        "nnperf ncu-command: error: ncu exited with status 3 profiling: "
    )


def test_export_then_kernels_table(fake_ncu):
    profiles = fake_ncu / "results/profiles/cuda/resnet18/bf16/bs256"
    profiles.mkdir(parents=True)
    (profiles / "baseline.ncu-rep").write_bytes(b"fake report")
    meta = profiles / "baseline.ncu.json"
    write_json(
        meta, {"kind": "ncu_profile", **H100_KEYS, "arch": "hopper", "clock_control": "none"}
    )
    csv_path = profiles / "baseline.csv"
    report = profiles / "baseline.ncu-rep"
    assert main(["ncu-command", "export", "--report", str(report), "--csv", str(csv_path)]) == 0
    assert csv_path.read_text() == REAL.text()  # the real export, byte for byte
    out = fake_ncu / "results/tables/kernels.csv"
    assert main(["ncu-kernels", "--profile", str(csv_path), str(meta), "--output", str(out)]) == 0
    table = pd.read_csv(out)
    assert list(table.columns) == list(kernels.KERNEL_COLUMNS)
    assert len(table) == 345
    assert set(table["clock_control"]) == {"none"} and set(table["arch"]) == {"hopper"}
    assert set(table["precision"]) == {"bf16"} and set(table["batch_size"]) == {256}


def test_export_of_a_corrupt_csv_fails_and_writes_nothing(fake_ncu, capsys, tmp_path):
    broken = tmp_path / "broken.csv"
    lines = (DATA / "a100_fp32_resnet18.csv").read_text().splitlines()
    broken.write_text("\n".join(lines[:3] + ['"1","2"'] + lines[3:]) + "\n")
    os.environ["FAKE_NCU_EXPORT"] = str(broken)
    report = tmp_path / "r.ncu-rep"
    report.write_bytes(b"x")
    rc = main(["ncu-command", "export", "--report", str(report), "--csv", str(tmp_path / "r.csv")])
    assert rc == 2
    message = _one_line_error(capsys, "ncu-command")
    assert message.startswith(f"{report} (export):4: row has 2 fields but the header has ")
    assert not (tmp_path / "r.csv").exists()


def test_export_exit_status_is_reported(fake_ncu, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_EXIT", "1")
    report = tmp_path / "r.ncu-rep"
    report.write_bytes(b"x")
    assert (
        main(["ncu-command", "export", "--report", str(report), "--csv", str(tmp_path / "c.csv")])
        == 2
    )
    assert "exited with status 1" in _one_line_error(capsys, "ncu-command")


def test_ncu_kernels_errors_name_file_and_line(tmp_path, capsys):
    path = tmp_path / "baseline.csv"
    lines = (DATA / "a100_fp32_resnet18.csv").read_text().splitlines()
    assert '"2,520"' in lines[5]
    lines[5] = lines[5].replace('"2,520"', '"2.520,00"')
    path.write_text("\n".join(lines) + "\n")
    meta = tmp_path / "baseline.ncu.json"
    write_json(meta, {**H100_KEYS, "precision": "fp32", "arch": "ampere"})
    out = tmp_path / "k.csv"
    assert main(["ncu-kernels", "--profile", str(path), str(meta), "--output", str(out)]) == 2
    assert _one_line_error(capsys, "ncu-kernels") == (
        f"{path}:6: column gpu__time_duration.sum: '2.520,00' is not a number or n/a"
    )
    keyless = tmp_path / "keyless.ncu.json"
    write_json(keyless, {"arch": "ampere", "clock_control": "base"})
    assert main(["ncu-kernels", "--profile", str(path), str(keyless), "--output", str(out)]) == 2
    assert "keyless.ncu.json: the meta names no 'device'" in _one_line_error(capsys, "ncu-kernels")
    assert not out.exists()


def test_ncu_kernels_without_profiles_is_an_error_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "kernels.csv"
    assert main(["ncu-kernels", "--output", str(out)]) == 2
    assert _one_line_error(capsys, "ncu-kernels").startswith("no profiles given; allowed: ")
    assert not out.exists()


@pytest.mark.slow
def test_profile_of_a_request_runs_nnperf_step_and_keys_the_meta(fake_ncu, capfd):
    """What rule ncu_profile runs: the step of a real request (on the CPU, under the stand-in
    ncu), and a meta that carries the request's keys for ncu-kernels."""
    root = fake_ncu / "resources/data/synthetic"
    synthetic = SyntheticData(train_images=16, test_images=4)
    data.prepare(DatasetRequest(root=str(root), dataset=DatasetSettings(synthetic=synthetic)))
    run = RunRequest(
        device="cpu",
        model="resnet18_cifar",
        precision="bf16",
        batch_size=4,
        variant="tuned",
        data_root=str(root),
        training=TrainingSettings(warmup_steps=1),
    )
    request_path = fake_ncu / "tuned.request.json"
    write_request(request_path, ProfileStepRequest(run=run, calibration_gemm_size=64))
    report = fake_ncu / "profiles/tuned.ncu-rep"
    meta_path = fake_ncu / "profiles/meta.json"
    rc = main(
        [
            "ncu-command", "profile", "--report", str(report), "--meta", str(meta_path),
            "--arch", "hopper", "--request", str(request_path),
        ]
    )  # fmt: skip
    assert rc == 0
    target = [sys.executable, "-m", "nnperf", "step", "--request", str(request_path)]
    argv = json.loads((fake_ncu / "ncu_argv.json").read_text())
    assert argv[argv.index("-o") + 2 :] == target
    out = capfd.readouterr().out
    assert "profiled one step of resnet18_cifar cpu bf16 bs4 tuned" in out
    assert '"flops": 524288' in out  # the calibration GEMM, 2 x 64^3
    meta = read_json(meta_path)
    assert meta["kind"] == "ncu_profile" and meta["target"] == target
    assert {key: meta[key] for key in kernels.CONFIG_KEYS} == {
        "device": "cpu",
        "model": "resnet18_cifar",
        "precision": "bf16",
        "batch_size": 4,
        "variant": "tuned",
    }
    assert meta["request"]["run"]["training"]["warmup_steps"] == 1
    assert meta["clock_control"] == NcuSettings().clock_control
    context = kernels.profile_context(meta_path)
    assert (context["variant"], context["arch"]) == ("tuned", "hopper")


def test_request_dry_run_and_its_errors(tmp_path, capsys):
    request_path = tmp_path / "r.json"
    run = RunRequest(device="cuda", model="resnet18_cifar", precision="bf16", batch_size=256)
    write_request(request_path, ProfileStepRequest(run=run))
    profile = ["ncu-command", "profile", "--report", "r.ncu-rep", "--arch", "hopper", "--dry-run"]
    assert main([*profile, "--request", str(request_path)]) == 0
    argv = shlex.split(capsys.readouterr().out)
    assert argv[argv.index("-o") + 2 :] == [
        sys.executable, "-m", "nnperf", "step", "--request", str(request_path),
    ]  # fmt: skip
    assert argv[argv.index("--clock-control") + 1] == NcuSettings().clock_control
    assert main([*profile, "--request", str(request_path), "--", "python", "x.py"]) == 2
    assert _one_line_error(capsys, "ncu-command") == (
        "give --request or a command after '--', not both"
    )
    request_path.write_text(json.dumps({"run": {"device": "cuda"}}))
    assert main([*profile, "--request", str(request_path)]) == 2
    assert _one_line_error(capsys, "ncu-command").startswith(f"{request_path}: run: ")


def _subparsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def test_every_flag_is_documented():
    verbs = dict(_subparsers(build_parser()))
    parsers = [verbs["ncu-kernels"], *dict(_subparsers(verbs["ncu-command"])).values()]
    for parser in parsers:
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert action.help and len(action.help) > 10, (parser.prog, action.dest)
    flags = {
        a.option_strings[0]
        for a in dict(_subparsers(verbs["ncu-command"]))["profile"]._actions
        if a.option_strings
    }
    assert {
        "--report",
        "--arch",
        "--clock-control",
        "--replay-mode",
        "--cache-control",
        "--ncu",
        "--meta",
        "--dry-run",
        "--request",
    } <= flags
    defaults = build_parser().parse_args(["ncu-command", "profile", "--report", "r.ncu-rep"])
    options = profiling.NcuOptions()
    assert (defaults.arch, defaults.clock_control, defaults.ncu) == (
        options.arch,
        options.clock_control,
        options.ncu,
    )
    assert options.clock_control == NcuSettings().clock_control
