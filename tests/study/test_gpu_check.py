"""`make gpu-check`: config/gpu-check.yaml covers every CUDA path once; the GPU targets run in
the Python they are started in (`nnperf gpu-env` stops them in one line without CUDA or
without nnperf's packages, and no venv is built); and `nnperf gpu-study --check` rehearsed for
real on this CPU with the check's own study file, devices overridden to cpu and sizes tiny."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import REPO, snakemake_env

from nnperf import cli
from nnperf.commands import gpu_env, gpu_study
from nnperf.core import config as study_config
from nnperf.core import files, layout
from nnperf.core.errors import NnperfError
from nnperf.study import selection
from nnperf.study.loading import load_study
from nnperf.study.stages import STAGES

GPU_CHECK = REPO / "config" / "gpu-check.yaml"


# --- what the check covers ------------------------------------------------------------------


def test_the_check_runs_every_cuda_path_once():
    study = load_study([GPU_CHECK], detect=lambda: "cuda")
    typed = study.typed
    matrix, notes = study_config.expand_matrix(study.config, lambda: "cuda")
    assert not notes and {key.device for key in matrix} == {"cuda"}
    assert {key.precision for key in matrix} == {"bf16", "fp16"}  # autocast; + GradScaler
    variants = typed.variants
    assert set(variants) == {"baseline", "tuned", "compiled"}
    assert variants["baseline"] == type(variants["baseline"])()  # eager, every default
    tuned = variants["tuned"]
    assert (tuned.channels_last, tuned.cudnn_benchmark, tuned.optimizer_impl, tuned.data_path) == (
        True,
        True,
        "fused",
        "device_resident",
    )
    assert variants["compiled"].compile == "reduce-overhead"  # CUDA graphs
    assert typed.dataset.name == "synthetic"  # no network
    # At least two processes per configuration: a process-level CI.
    assert typed.timing.min_processes >= 2 and typed.timing.max_processes >= 2
    chosen = selection.select_stages(typed, matrix, ncu_on_path=True)
    assert [(k.precision, k.variant) for k in chosen.ncu] == [("bf16", "tuned")]
    assert len(chosen.operator_profile) == 1
    assert [(k.precision, k.variant, recipe) for k, recipe in chosen.training] == [
        ("bf16", "tuned", "default")
    ]
    assert typed.recipes["default"].epochs == 1
    assert typed.ceilings.gemm_sizes and len(typed.ceilings.gemm_sizes) == 1


def test_make_check_dry_runs_the_check():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    check = re.search(r"^check:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE).group(1)
    assert "--configfile config/gpu-check.yaml --config 'ncu={enabled: true}'" in check


# --- gpu-env --------------------------------------------------------------------------------


def fake_torch(version="2.11.0+cu130", cuda="13.0", available=True, count=1):
    return SimpleNamespace(
        __version__=version,
        version=SimpleNamespace(cuda=cuda, hip=None),
        cuda=SimpleNamespace(is_available=lambda: available, device_count=lambda: count),
    )


def test_torch_without_cuda_is_one_line_each_way():
    def absent():
        raise ModuleNotFoundError("No module named 'torch'")

    assert gpu_env.torch_problem(absent) == (
        "torch cannot be imported (ModuleNotFoundError: No module named 'torch')"
    )
    cpu_build = gpu_env.torch_problem(lambda: fake_torch("2.11.0+cpu", cuda=None))
    assert cpu_build == "torch 2.11.0+cpu is a CPU-only build (torch.version.cuda is None)"
    unseen = gpu_env.torch_problem(lambda: fake_torch(available=False, count=0))
    assert unseen.startswith("torch 2.11.0+cu130 (built for CUDA 13.0) sees no GPU")
    assert gpu_env.torch_problem(fake_torch) is None


def test_missing_packages_are_named_together_with_the_pip_command():
    hidden = {"snakemake", "jsonschema", "yaml"}

    def find_spec(name):
        return None if name in hidden else object()

    missing = gpu_env.missing_packages(find_spec)
    assert missing == ["snakemake", "pyyaml", "jsonschema"]
    line = gpu_env.packages_line(missing, python="/usr/bin/python3")
    assert "\n" not in line
    assert "/usr/bin/python3 -m pip install snakemake pyyaml jsonschema" in line
    assert "--no-index --find-links" in line  # the offline way
    assert gpu_env.missing_packages(lambda name: object()) == []


def test_gpu_env_checks_every_package_nnperf_declares():
    tomllib = pytest.importorskip("tomllib", reason="Python 3.10 has no tomllib")
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {canonicalize_name(Requirement(line).name) for line in project["dependencies"]}
    checked = {canonicalize_name(name) for name in gpu_env.PACKAGES.values()}
    assert checked | set(gpu_env.NOT_CHECKED_HERE) == declared


def test_gpu_env_without_torch_is_one_line_and_exit_2():
    # torch made unimportable in a real `nnperf gpu-env` process.
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from nnperf.cli import main\n"
        "raise SystemExit(main(['gpu-env']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=snakemake_env(),
        timeout=120,
    )
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gpu-env: no CUDA in {sys.executable}: torch ")
    assert "cannot be imported" in lines[0] and "PYTHON=" in lines[0]


def test_gpu_env_with_cuda_but_missing_packages_names_them_all_in_one_line():
    # A CUDA torch is what this machine cannot have: a stand-in module says it sees one GPU.
    # snakemake and jsonschema are hidden from the real import system.
    code = (
        "import sys, types\n"
        "torch = types.ModuleType('torch'); torch.__version__ = '2.11.0+cu130'\n"
        "torch.version = types.SimpleNamespace(cuda='13.0', hip=None)\n"
        "torch.cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 1)\n"
        "sys.modules['torch'] = torch\n"
        "sys.modules['snakemake'] = sys.modules['jsonschema'] = None\n"
        "from nnperf.cli import main\n"
        "raise SystemExit(main(['gpu-env']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=snakemake_env(),
        timeout=120,
    )
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("gpu-env: nnperf needs snakemake, jsonschema, which this Python")
    assert f"{sys.executable} -m pip install snakemake jsonschema" in lines[0]


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_gpu_check_without_cuda_stops_in_one_line_and_builds_no_venv(tmp_path):
    if _has_cuda():
        pytest.skip("this machine has a GPU: make gpu-check would run the check")
    venv = tmp_path / "venv"
    default_venv = REPO / ".venv"
    before = default_venv.stat().st_mtime_ns if default_venv.exists() else None
    # A top-level make, as typed at a shell, also when the suite itself runs under `make test`
    # (a sub-make would name itself make[1]).
    env = {
        k: v for k, v in snakemake_env().items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")
    }
    result = subprocess.run(
        ["make", "--no-print-directory", "gpu-check", f"VENV={venv}", f"PYTHON={sys.executable}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode != 0
    assert result.stdout == ""  # not even a command echoed: the check is the first thing
    ours = [
        line for line in result.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", line)
    ]
    assert len(ours) == 1, result.stderr
    assert ours[0].startswith(f"gpu-env: no CUDA in {sys.executable}: torch ")
    assert "sees no GPU" in ours[0] or "CPU-only build" in ours[0]
    assert not venv.exists()
    after = default_venv.stat().st_mtime_ns if default_venv.exists() else None
    assert after == before
    assert not (REPO / "results").exists() or "gpu-check" not in os.listdir(REPO / "results")


# --- gpu-study --check ----------------------------------------------------------------------


def parse(*argv: str):
    return cli.build_parser(["gpu-study"]).parse_args(["gpu-study", *argv])


def test_check_reads_the_check_study_under_any_other_and_has_its_own_example():
    assert gpu_study.study_files(parse("--check")) == (
        ["config/gpu-check.yaml"],
        Path("reports/examples/h100-gpu-check"),
    )
    assert gpu_study.study_files(parse("--check", "--configfile", "cpu.yaml", "--dest", "x")) == (
        ["config/gpu-check.yaml", "cpu.yaml"],
        Path("x"),
    )
    assert gpu_study.study_files(parse("--dest", "y")) == (["config/gpu.yaml"], Path("y"))
    with pytest.raises(NnperfError, match="gpu-study needs --dest"):
        gpu_study.study_files(parse())


def cpu_overlay(path: Path) -> Path:
    """config/gpu-check.yaml brought down to this CPU: devices cpu (fp16 is left out there
    with a note), batch 8 everywhere the check names 256, seconds of timing, a tiny dataset
    and ceilings, and the check's variants but the compiled ones (Inductor's C++ compilation
    takes minutes on two cores)."""
    check = yaml.safe_load(GPU_CHECK.read_text(encoding="utf-8"))
    overlay = {
        "devices": ["cpu"],
        "dataset": {"synthetic": {"train_images": 64, "test_images": 32}},
        "batch_sizes": [8],
        "variants": {
            name: toggles
            for name, toggles in check["variants"].items()
            if not (toggles or {}).get("compile")
        },
        "training": {"warmup_steps": 1, "timed_steps": 2},
        # One window per process; a budget that holds both processes on a busy machine too.
        "timing": {
            "min_seconds": 0,
            "max_seconds": 60,
            "min_windows": 1,
            "max_windows": 1,
            # Flagged and kept on a runner that is never quiet (tests/configs/tiny.yaml).
            "disturbed_windows": "keep",
        },
        "ceilings": {
            "gemm_sizes": [64, 128],
            "trials": 2,
            "bandwidth_bytes": 16777216,
            "sweep_max_bytes": 4194304,
        },
    }
    for section in ("ncu", "operator_profile", "convergence"):
        overlay[section] = {"batch_sizes": [8]}
    overlay["operator_profile"].update(warmup_steps=1, steps=2)
    path.write_text(yaml.safe_dump(overlay), encoding="utf-8")
    return path


@pytest.mark.workflow
def test_the_gpu_check_rehearsed_on_this_cpu(tmp_path):
    workdir = tmp_path / "study"
    shutil.copytree(REPO / "config", workdir / "config")
    overlay = cpu_overlay(workdir / "cpu.yaml")
    result = subprocess.run(
        [sys.executable, "-m", "nnperf", "gpu-study", "--check", "--configfile", overlay.name]
        + ["--directory", str(workdir), "--cores", "2"],
        capture_output=True,
        text=True,
        env=snakemake_env(),
        cwd=workdir,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Traceback" not in result.stderr
    assert "nnperf note: precision fp16 is left out on cpu" in result.stderr
    dest = workdir / "reports" / "examples" / "h100-gpu-check"
    # The doctor's checks once (a stage of their own), then each stage's Snakemake call.
    assert result.stdout.splitlines()[-1].startswith(f"gpu-study: {len(STAGES) + 1} stages in ")
    assert "doctor: ready:" in result.stdout

    # Every stage's output, for every configuration the check asks of this CPU.
    keys = [
        {"device": "cpu", "model": "resnet18_cifar", "precision": "bf16", "batch_size": 8}
        | {"variant": variant}
        for variant in ("baseline", "tuned")
    ]
    for key in keys:
        run = files.read_json(workdir / layout.path("run", dataset="synthetic", **key))
        assert run["status"] == "ok", key
    runs = list(csv.DictReader(open(dest / "runs.csv", newline="")))
    assert {(row["precision"], row["variant"]) for row in runs} == {
        ("bf16", "baseline"),
        ("bf16", "tuned"),
    }
    for variant in ("baseline", "tuned"):  # two processes each: the check's floor
        assert len({row["process"] for row in runs if row["variant"] == variant}) == 2
    tuned = keys[1]
    opprofile = workdir / layout.path("opprofile", dataset="synthetic", **tuned)
    assert list((workdir / "results/opprofiles").rglob("*.json")) == [opprofile]
    profile = files.read_json(opprofile)
    assert profile["kind"] == "operator_profile" and profile["status"] in ("ok", "over_budget")
    for kind in ("operators_figure", "memory_figure"):
        assert (workdir / layout.path(kind, dataset="synthetic", **tuned)).stat().st_size > 0
    trained = list(csv.DictReader(open(dest / "training.csv", newline="")))
    assert [(row["variant"], row["epochs_run"]) for row in trained] == [("tuned", "1")]
    # No ncu on a CPU: the roofline is the analytic one, one point per configuration.
    points = list(csv.DictReader(open(dest / "roofline_points.csv", newline="")))
    assert points and {row["source"] for row in points} == {"analytic"}
    assert (dest / "cpu.json").is_file()
    assert (workdir / "reports" / "report.html").stat().st_size > 0  # snakemake --report

    # The example: the report, its tables and the stage times; never a profile or checkpoint.
    summary = (dest / "summary.html").read_text(encoding="utf-8")
    assert summary == (workdir / layout.path("summary_html", dataset="synthetic")).read_text()
    assert "GPU check" in summary
    with open(dest / "stage_times.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["stage"] for row in rows] == ["preflight"] + [stage.name for stage in STAGES]
    assert all(float(row["wall_time_s"]) > 0 for row in rows)
    assert not [p for p in dest.rglob("*") if p.suffix in (".ncu-rep", ".pt", ".gz")]
    assert list((workdir / "results").rglob("*.pt")), "training wrote no checkpoint to leave out"
    readme = (dest / "README.md").read_text(encoding="utf-8")
    assert "`nnperf gpu-study --check` (`make gpu-check`)" in readme
    assert "--configfile config/gpu-check.yaml cpu.yaml" in readme
    for stage in STAGES:
        assert f"| {stage.name} | {stage.what} |" in readme
    assert "- logical CPUs:" in readme


def test_the_check_plans_within_six_minutes_on_the_h100():
    """What a lent GPU machine leaves after its start: `nnperf plan`'s wall time of the check,
    run as `make gpu-check` runs it (stage by stage, the doctor's checks once), on the
    recorded H100's timings."""
    from nnperf.study import plan

    assert plan.total_seconds([str(GPU_CHECK)], timings="h100", stages=True) <= 6 * 60
