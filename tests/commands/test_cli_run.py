"""`nnperf run` and `nnperf step` by hand and under ncu: real subprocesses, real data."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from nnperf.cli import build_parser, main
from nnperf.commands.run import request_from
from nnperf.core.contract import (
    DatasetRequest,
    DatasetSettings,
    ProfileStepRequest,
    RunRequest,
    SyntheticData,
    TimingSettings,
    TrainingSettings,
    VariantSettings,
    write_request,
)
from nnperf.core.devices import detect_best_device
from nnperf.core.files import read_json
from nnperf.core.vocab import STEP_CSV_COLUMNS, WINDOW_CSV_COLUMNS
from nnperf.workload import datasets as data

REPO = Path(__file__).resolve().parents[2]
MODEL = "resnet18_cifar"


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data") / "synthetic"
    synthetic = SyntheticData(train_images=64, test_images=16)
    data.prepare(DatasetRequest(root=str(root), dataset=DatasetSettings(synthetic=synthetic)))
    return root


def nnperf(
    *args: str, cwd: Path = REPO, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    command = (
        [sys.executable, *prefix, "-m", "nnperf", *args]
        if not prefix
        else [sys.executable, *prefix, *args]
    )
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )


def run_flags(data_root: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--model",
        MODEL,
        "--device",
        "cpu",
        "--precision",
        "fp32",
        "--batch-size",
        "4",
        "--dataset",
        "synthetic",
        "--data-root",
        str(data_root),
        "--warmup-steps",
        "2",
        "--timed-steps",
        "3",
        "--max-processes",
        "2",
        "--min-windows",
        "1",
        "--max-windows",
        "1",
        # Flagged and kept: a test runner is never quiet (tests/configs/tiny.yaml says why).
        "--disturbed-windows",
        "keep",
        "--out-json",
        str(out / "run.json"),
        "--out-windows-csv",
        str(out / "run_windows.csv"),
        "--out-steps-csv",
        str(out / "run_steps.csv"),
        *extra,
    ]


@pytest.mark.slow
def test_run_writes_json_and_steps_csv(data_root, tmp_path):
    settings = json.dumps(
        {"channels_last": True, "optimizer_impl": "foreach", "data_path": "device_resident"}
    )
    done = nnperf(
        "run",
        *run_flags(
            data_root,
            tmp_path,
            "--variant",
            "tuned",
            "--variant-settings",
            settings,
            "--seed",
            "1",
            "--precision",
            "bf16",
        ),
    )
    assert done.returncode == 0, done.stderr
    assert f"{MODEL} cpu bf16 bs4 tuned:" in done.stdout and "img/s" in done.stdout
    assert "2 processes x 2 windows" in done.stdout
    document = read_json(tmp_path / "run.json")
    assert document["schema_version"] == 1 and document["status"] == "ok"
    assert (document["model"], document["precision"], document["variant"]) == (MODEL, "bf16", "tuned")
    assert [p["seed"] for p in document["processes"]] == [1, 2]
    assert document["variant_settings"]["data_path"] == "device_resident"
    assert document["num_classes"] == 10 and document["input_size"] == 32
    assert document["train_images"] == 64
    assert document["environment"]["amp_dtype"] == "bfloat16"
    assert document["environment"]["git_commit"]  # the tests run inside the repository
    steps = pd.read_csv(tmp_path / "run_steps.csv")
    windows = pd.read_csv(tmp_path / "run_windows.csv")
    assert tuple(steps.columns) == STEP_CSV_COLUMNS and len(steps) == 3 * len(windows)
    assert tuple(windows.columns) == WINDOW_CSV_COLUMNS
    # One clean window per process; one a neighbour disturbed is kept beside it.
    clean = windows[~windows["discarded"].astype(bool)]
    assert clean["process"].tolist() == [0, 1]
    used = steps.merge(clean[["process", "window"]], on=["process", "window"])
    assert used["step_time_s"].median() == pytest.approx(document["step_time_s"]["median"])


@pytest.mark.slow
def test_bad_input_is_one_line_and_exit_2(data_root, tmp_path):
    done = nnperf("run", *run_flags(data_root, tmp_path, "--model", "resnet19"))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1  # one line, no traceback
    assert done.stderr.startswith("nnperf run: error: model 'resnet19' is unknown (closest: resnet18")
    assert not (tmp_path / "run.json").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ("--precision", "tf32"),
            "precision 'tf32' cannot run on device 'cpu'; allowed there: fp32, bf16",
        ),
        (("--batch-size", "128"), "batch_size 128 is larger than the training split (64 images)"),
        (
            ("--variant-settings", '{"data_path": "ssd"}'),
            "variant setting data_path='ssd' is not allowed",
        ),
    ],
)
def test_bad_input_in_process(data_root, tmp_path, capsys, flags, message):
    assert main(["run", *run_flags(data_root, tmp_path, *flags)]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run.json").exists()


OOM_PREFIX = (
    "-c",
    "import resource, sys\n"
    "import torch\n"
    "vm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmSize'))\n"
    "resource.setrlimit(resource.RLIMIT_AS, (vm * 1024 + 768 * 2**20, resource.RLIM_INFINITY))\n"
    "from nnperf.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n",
)


@pytest.mark.slow
def test_out_of_memory_exits_0_with_status_oom(data_root, tmp_path):
    """A 768 MiB address-space cap and 512x512 inputs: ResNet-18 cannot fit, for real."""
    done = nnperf("run", *run_flags(data_root, tmp_path, "--input-size", "512"), prefix=OOM_PREFIX)
    assert done.returncode == 0, done.stderr
    assert "out of memory" in done.stderr
    document = read_json(tmp_path / "run.json")
    assert document["status"] == "oom"
    assert "allocate" in document["error"]
    assert document["throughput_img_s"] is None
    steps = pd.read_csv(tmp_path / "run_steps.csv")
    assert tuple(steps.columns) == STEP_CSV_COLUMNS and steps.empty


@pytest.mark.slow
def test_other_failures_exit_non_zero_with_traceback(data_root, tmp_path):
    """VGG-16's five max-pools cannot shrink 8x8 inputs: a real crash, not a result."""
    done = nnperf(
        "run", *run_flags(data_root, tmp_path, "--model", "vgg16_cifar", "--input-size", "8")
    )
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr
    assert "RuntimeError" in done.stderr
    assert not (tmp_path / "run.json").exists()


def write_step_request(data_root: Path, path: Path, **run) -> Path:
    """A ProfileStepRequest JSON, as rule profile_request writes it."""
    request = ProfileStepRequest(
        run=RunRequest(
            device="cpu",
            model=MODEL,
            precision="fp32",
            batch_size=4,
            data_root=str(data_root),
            training=TrainingSettings(warmup_steps=1),
            **run,
        ),
        calibration_gemm_size=128,
    )
    write_request(path, request)
    return path


@pytest.mark.slow
def test_step_writes_the_sidecar(data_root, tmp_path):
    out = tmp_path / "profile.json"
    request = write_step_request(data_root, tmp_path / "request.json", variant="tuned")
    done = nnperf("step", "--request", str(request), "--out-json", str(out))
    assert done.returncode == 0, done.stderr
    document = read_json(out)
    assert document["kind"] == "profile_step" and document["status"] == "ok"
    assert (document["model"], document["variant"], document["warmup_steps"]) == (
        MODEL,
        "tuned",
        1,
    )
    assert document["nvtx"]["step_range"] == "nnperf_step"
    assert document["nvtx"]["phase_ranges"] == ["forward", "backward", "optimizer"]
    assert document["calibration_gemm"]["flops"] == 2 * 128**3
    assert document["calibration_gemm"]["range"] == "nnperf_calibration_gemm"
    assert document["step"]["loss"] > 0


def test_step_without_out_json_prints_the_sidecar(data_root, tmp_path, capsys):
    """How the ncu rule runs it: the sidecar goes to the job log."""
    request = write_step_request(data_root, tmp_path / "request.json")
    assert main(["step", "--request", str(request)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    printed = json.loads(next(line for line in lines if line.startswith("{")))
    assert lines[-1].startswith("profiled one step of resnet18_cifar cpu fp32 bs4 baseline")
    assert printed["status"] == "ok" and printed["calibration_gemm"]["flops"] == 2 * 128**3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["request.json"]


def test_step_with_a_bad_request_is_one_line(tmp_path, capsys):
    bad = tmp_path / "request.json"
    bad.write_text(json.dumps({"run": {"device": "cpu", "colour": "red"}}))
    assert main(["step", "--request", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"nnperf step: error: {bad}: run.colour is not a setting of RunRequest; allowed: "
        + ", ".join(f.name for f in dataclasses.fields(RunRequest))
    )


def test_timed_run_needs_its_outputs(data_root, tmp_path, capsys):
    flags = run_flags(data_root, tmp_path)
    index = flags.index("--out-json")
    del flags[index : index + 2]
    with pytest.raises(SystemExit) as exit_info:
        main(["run", *flags])
    assert exit_info.value.code == 2
    assert "the following arguments are required: --out-json" in capsys.readouterr().err


def _request(*flags: str) -> RunRequest:
    parser = build_parser(["run"])
    return request_from(
        parser.parse_args(
            ["run", *flags, "--out-json", "a", "--out-windows-csv", "w", "--out-steps-csv", "b"]
        )
    )


def test_flags_take_their_defaults_from_the_contract():
    """Only the keys without a default are given: everything else is the contract's."""
    request = _request(
        "--model", MODEL, "--device", "cpu", "--precision", "fp32", "--batch-size", "8"
    )
    assert request == RunRequest(device="cpu", model=MODEL, precision="fp32", batch_size=8)


def test_flags_build_the_request_they_mirror(tmp_path):
    settings = tmp_path / "variant.json"
    settings.write_text(json.dumps({"optimizer_impl": "foreach", "num_workers": 2}))
    request = _request(
        "--model", MODEL, "--device", "auto", "--precision", "bf16", "--batch-size", "16",
        "--variant", "workers", "--variant-settings", str(settings), "--target-ci", "0.02",
        "--dataset", "cifar10", "--data-root", "elsewhere", "--input-size", "64",
        "--warmup-steps", "3", "--timed-steps", "7", "--optimizer", "adam", "--lr", "0.01",
        "--momentum", "0.5", "--weight-decay", "0", "--seed", "9", "--no-augment",
    )  # fmt: skip
    assert request == RunRequest(
        device=detect_best_device(),
        model=MODEL,
        precision="bf16",
        batch_size=16,
        variant="workers",
        settings=VariantSettings(optimizer_impl="foreach", num_workers=2),
        dataset="cifar10",
        data_root="elsewhere",
        input_size=64,
        training=TrainingSettings(
            warmup_steps=3, timed_steps=7, optimizer="adam", lr=0.01, momentum=0.5,
            weight_decay=0.0, seed=9, augment=False,
        ),  # fmt: skip
        timing=TimingSettings(target_ci=0.02),
    )
    assert request.seed_of(2) == 11


def test_help_documents_every_flag_with_the_contract_defaults():
    done = nnperf("run", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for flag in (
        "--model",
        "--device",
        "--precision",
        "--batch-size",
        "--variant",
        "--variant-settings",
        "--dataset",
        "--data-root",
        "--input-size",
        "--warmup-steps",
        "--timed-steps",
        "--optimizer",
        "--lr",
        "--momentum",
        "--weight-decay",
        "--seed",
        "--augment",
        "--target-ci",
        "--min-seconds",
        "--max-seconds",
        "--min-processes",
        "--max-processes",
        "--min-windows",
        "--max-windows",
        "--out-json",
        "--out-windows-csv",
        "--out-steps-csv",
        "--workflow-dir",
    ):
        assert flag in text, flag
    defaults = TrainingSettings()
    assert f"steps in one timed window (default: {defaults.timed_steps})" in text
    assert f"worker processes at most (default: {TimingSettings().max_processes})" in text
    assert f"learning rate (default: {defaults.lr})" in text
    assert "--profile-one-step" not in text
    step = nnperf("step", "--help")
    assert "--request" in step.stdout and "--out-json" in step.stdout


MYNET = """\
from torch import nn


def build(num_classes):
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, num_classes))
"""


def test_a_model_from_the_users_file_is_measured_by_name(data_root, tmp_path):
    """`nnperf run --model mynet --model-factory file.py:build`: the user's own nn.Module,
    as config `models: [{name: mynet, factory: ...}]` builds it."""
    factory = tmp_path / "mynet.py"
    factory.write_text(MYNET)
    flags = run_flags(data_root, tmp_path, "--model", "mynet", "--model-factory", f"{factory}:build")
    assert main(["run", *flags]) == 0
    document = read_json(tmp_path / "run.json")
    assert document["status"] == "ok" and document["model"] == "mynet"
    assert document["num_classes"] == 10 and document["input_size"] == 32


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--model", "mynet:MyNet"), "model 'mynet:MyNet' is not a name; your own code goes in"),
        (
            ("--model", "mynet", "--model-factory", "missing.py:build"),
            "factory file",
        ),
    ],
)
def test_a_factory_given_wrongly_is_one_line(data_root, tmp_path, capsys, flags, message):
    assert main(["run", *run_flags(data_root, tmp_path, *flags)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run.json").exists()
