"""`nnperf run` and `nnperf step` as the workflow calls them: real subprocesses, real data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from nnperf import data
from nnperf.cli import main
from nnperf.files import read_json
from nnperf.vocab import STEP_CSV_COLUMNS

REPO = Path(__file__).resolve().parents[1]
MODEL = "resnet18_cifar"


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data") / "synthetic"
    data.prepare(
        "synthetic", root, synthetic=data.SyntheticSettings(train_images=64, test_images=16)
    )
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
        "--out-json",
        str(out / "rep0.json"),
        "--out-steps-csv",
        str(out / "rep0_steps.csv"),
        *extra,
    ]


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
            "--rep",
            "1",
            "--precision",
            "bf16",
        ),
    )
    assert done.returncode == 0, done.stderr
    assert f"{MODEL} cpu bf16 bs4 tuned rep1:" in done.stdout and "img/s" in done.stdout
    document = read_json(tmp_path / "rep0.json")
    assert document["schema_version"] == 1 and document["status"] == "ok"
    assert (document["model"], document["precision"], document["variant"], document["rep"]) == (
        MODEL,
        "bf16",
        "tuned",
        1,
    )
    assert document["effective_seed"] == 1
    assert document["variant_settings"]["data_path"] == "device_resident"
    assert document["num_classes"] == 10 and document["input_size"] == 32
    assert document["train_images"] == 64
    assert document["environment"]["amp_dtype"] == "bfloat16"
    assert document["environment"]["git_commit"]  # the tests run inside the repository
    steps = pd.read_csv(tmp_path / "rep0_steps.csv")
    assert tuple(steps.columns) == STEP_CSV_COLUMNS and len(steps) == 3
    assert steps["step_time_s"].median() == pytest.approx(document["step_time_s"]["median"])


def test_bad_input_is_one_line_and_exit_2(data_root, tmp_path):
    done = nnperf("run", *run_flags(data_root, tmp_path, "--model", "resnet19"))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1  # one line, no traceback
    assert done.stderr.startswith("nnperf run: error: model 'resnet19' is unknown; allowed:")
    assert not (tmp_path / "rep0.json").exists()


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
    assert not (tmp_path / "rep0.json").exists()


OOM_PREFIX = (
    "-c",
    "import resource, sys\n"
    "import torch\n"
    "vm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmSize'))\n"
    "resource.setrlimit(resource.RLIMIT_AS, (vm * 1024 + 768 * 2**20, resource.RLIM_INFINITY))\n"
    "from nnperf.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n",
)


def test_out_of_memory_exits_0_with_status_oom(data_root, tmp_path):
    """A 768 MiB address-space cap and 512x512 inputs: ResNet-18 cannot fit, for real."""
    done = nnperf("run", *run_flags(data_root, tmp_path, "--input-size", "512"), prefix=OOM_PREFIX)
    assert done.returncode == 0, done.stderr
    assert "out of memory" in done.stderr
    document = read_json(tmp_path / "rep0.json")
    assert document["status"] == "oom"
    assert "allocate" in document["error"]
    assert document["throughput_img_s"] is None
    steps = pd.read_csv(tmp_path / "rep0_steps.csv")
    assert tuple(steps.columns) == STEP_CSV_COLUMNS and steps.empty


def test_other_failures_exit_non_zero_with_traceback(data_root, tmp_path):
    """VGG-16's five max-pools cannot shrink 8x8 inputs: a real crash, not a result."""
    done = nnperf(
        "run", *run_flags(data_root, tmp_path, "--model", "vgg16_cifar", "--input-size", "8")
    )
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr
    assert "RuntimeError" in done.stderr
    assert not (tmp_path / "rep0.json").exists()


def profile_flags(data_root: Path, out: Path) -> list[str]:
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
        "1",
        "--calibration-gemm-size",
        "128",
        "--out-json",
        str(out),
    ]


def test_step_writes_the_sidecar(data_root, tmp_path):
    out = tmp_path / "profile.json"
    done = nnperf("step", *profile_flags(data_root, out))
    assert done.returncode == 0, done.stderr
    document = read_json(out)
    assert document["kind"] == "profile_step" and document["status"] == "ok"
    assert document["nvtx"]["step_range"] == "nnperf_step"
    assert document["calibration_gemm"]["flops"] == 2 * 128**3
    assert document["calibration_gemm"]["range"] == "nnperf_calibration_gemm"
    assert document["step"]["loss"] > 0


def test_step_without_out_json_prints_the_sidecar(data_root, tmp_path, capsys):
    """How the ncu rule calls it: the sidecar goes to the job log."""
    flags = profile_flags(data_root, tmp_path / "unused.json")[:-2]
    assert main(["step", *flags]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    printed = json.loads(next(line for line in lines if line.startswith("{")))
    assert lines[-1].startswith("profiled one step of resnet18_cifar cpu fp32 bs4 baseline")
    assert printed["status"] == "ok" and printed["calibration_gemm"]["flops"] == 2 * 128**3
    assert not (tmp_path / "unused.json").exists()


def test_timed_run_needs_out_json(data_root, tmp_path, capsys):
    flags = run_flags(data_root, tmp_path)
    index = flags.index("--out-json")
    del flags[index : index + 2]
    assert main(["run", *flags]) == 2
    assert "--out-json is missing; allowed: a path" in capsys.readouterr().err


def test_run_profile_one_step_is_the_same_engine(data_root, tmp_path):
    out = tmp_path / "profile.json"
    assert main(["run", "--profile-one-step", *profile_flags(data_root, out)]) == 0
    document = read_json(out)
    assert document["kind"] == "profile_step"
    assert document["nvtx"]["phase_ranges"] == ["forward", "backward", "optimizer"]


def test_help_documents_every_flag():
    done = nnperf("run", "--help")
    assert done.returncode == 0
    for flag in (
        "--model",
        "--device",
        "--precision",
        "--batch-size",
        "--variant",
        "--variant-settings",
        "--rep",
        "--dataset",
        "--data-root",
        "--warmup-steps",
        "--timed-steps",
        "--optimizer",
        "--lr",
        "--momentum",
        "--weight-decay",
        "--seed",
        "--augment",
        "--out-json",
        "--out-steps-csv",
        "--profile-one-step",
        "--calibration-gemm-size",
        "--input-size",
        "--workflow-dir",
    ):
        assert flag in done.stdout, flag
