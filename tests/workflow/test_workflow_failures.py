"""The failure modes a new user hit, each in a real Snakemake run: nothing finished is lost,
nothing fails with a cryptic message.

One small study (fp32, one batch size, one variant, a few seconds of timing) is built per
session and copied for each test that changes it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import pytest
from conftest import TINY_CONFIG, run_snakemake
from cifar_archives import build_cifar10_archive

from nnperf.core import devices, layout

pytestmark = pytest.mark.workflow

SMALL = (
    "--configfile",
    str(TINY_CONFIG),
    "--config",
    "precisions=[fp32]",
    "batch_sizes=[4]",
    "variants={baseline: {}}",
    "timing={max_seconds: 15}",
    # Only what these tests look at: no operator profile or training to accuracy, which
    # each study on other data would run again.
    "convergence={enabled: false}",
    "operator_profile={enabled: false}",
)
KEYS = {
    "device": "cpu",
    "model": "resnet18_cifar",
    "precision": "fp32",
    "batch_size": 4,
    "variant": "baseline",
}


def fingerprint(root: Path) -> dict[str, str]:
    """SHA-256 of every file under results/ and reports/ (what a study leaves)."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for folder in ("results", "reports")
        for path in sorted((root / folder).rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="module")
def small_study(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("small_study")
    shutil.copytree(Path(__file__).resolve().parents[2] / "config", workdir / "config")
    result = run_snakemake(workdir, *SMALL)
    assert result.returncode == 0, result.stderr[-4000:]
    return workdir


@pytest.fixture
def copy_of_small_study(small_study, tmp_path) -> Path:
    target = tmp_path / "study"
    shutil.copytree(small_study, target, symlinks=True)
    return target


def test_an_empty_matrix_runs_nothing_and_leaves_every_result_byte_identical(copy_of_small_study):
    study = copy_of_small_study
    before = fingerprint(study)
    assert layout.path("table", dataset="synthetic", name="runs") in before

    result = run_snakemake(study, *SMALL, "precisions=[tf32]")
    # A study with nothing to measure is an error, its one line the last thing printed.
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("nnperf: nothing to measure: the matrix of models x devices x")
    assert result.stderr.count("nothing to measure") == 1
    assert "precision tf32 is left out on cpu" in result.stderr
    assert "Error" not in result.stderr and "RUN_JSON" not in result.stderr

    # Asking for a table of the empty study by name fails at DAG-build time: no job runs,
    # so Snakemake never deletes the finished table to rebuild it.
    table = layout.path("table", dataset="synthetic", name="runs")
    named = run_snakemake(study, *SMALL, "precisions=[tf32]", "--", table)
    assert named.returncode != 0
    assert "nnperf: nothing to measure" in named.stderr
    assert "Execute" not in named.stdout + named.stderr
    assert fingerprint(study) == before


def test_a_study_on_other_data_writes_beside_the_first_never_over_it(copy_of_small_study, tmp_path):
    study = copy_of_small_study
    before = fingerprint(study)
    archive, md5, _, _ = build_cifar10_archive(tmp_path / "archive", train_count=40, test_count=8)
    cifar = f"dataset={{name: cifar10, source: '{archive}', md5: {md5}}}"

    plan = run_snakemake(study, *SMALL, cifar, "--dry-run")
    assert plan.returncode == 0, plan.stderr[-3000:]
    planned = plan.stdout
    assert layout.path("run", dataset="cifar10", **KEYS) in planned
    assert layout.path("run", dataset="synthetic", **KEYS) not in planned

    result = run_snakemake(study, *SMALL, cifar)
    assert result.returncode == 0, result.stderr[-4000:]
    after = fingerprint(study)
    # Every file of the synthetic study is still there, byte for byte (the ceilings are
    # the machine's and were not re-measured either).
    assert {path: after.get(path) for path in before} == before
    for dataset in ("synthetic", "cifar10"):
        run = json.loads((study / layout.path("run", dataset=dataset, **KEYS)).read_text())
        assert run["dataset"] == dataset
        complexity = study / layout.path("complexity", dataset=dataset, model="resnet18_cifar")
        assert json.loads(complexity.read_text())["dataset"] == dataset
        assert (study / layout.path("summary_html", dataset=dataset)).is_file()
        assert (study / layout.path("table", dataset=dataset, name="summary")).is_file()


@pytest.mark.skipif(devices.has_cuda_driver(), reason="this machine has a GPU driver")
def test_a_device_the_machine_lacks_stops_the_run_in_seconds_with_one_line(workdir):
    started = time.monotonic()
    result = run_snakemake(workdir, "--configfile", str(TINY_CONFIG), "--config", "devices=[cuda]")
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    assert elapsed < 60, f"took {elapsed:.0f} s"
    lines = [line for line in result.stderr.splitlines() if "'cuda' is not available" in line]
    assert lines == [
        "nnperf: config devices: device 'cuda' is not available on this machine (no GPU "
        "driver: /dev/nvidiactl, /dev/kfd and nvidia-smi, rocm-smi are absent); use devices: "
        "[cpu] or [auto] here, or run the study on a GPU machine or through a cluster profile "
        "(docs/cluster.md)"
    ]
    assert "Error in rule" not in result.stderr
    # The line is the last thing printed, before Snakemake's banner and job table.
    assert result.stderr.strip().splitlines()[-1] == lines[0]
    assert "SNAKEMAKE" not in result.stderr and "Job stats" not in result.stderr
    assert not (workdir / "results").exists()
    # A dry run plans the GPU study anyway, with a note.
    plan = run_snakemake(
        workdir, "--configfile", str(TINY_CONFIG), "--config", "devices=[cuda]", "--dry-run"
    )
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert "timed_run" in plan.stdout
    notes = [line for line in plan.stderr.splitlines() if "'cuda' is not available" in line]
    assert notes == [
        "nnperf note: " + lines[0].removeprefix("nnperf: ") + "; planned anyway: a run of its "
        "jobs here stops before the first one"
    ]


def test_every_failed_job_ends_the_run_with_its_cause(workdir, tmp_path):
    missing = tmp_path / "nowhere" / "cifar-10-python.tar.gz"
    result = run_snakemake(
        workdir,
        "--configfile",
        str(TINY_CONFIG),
        "--config",
        f"dataset={{name: cifar10, source: '{missing}', md5: 0123456789abcdef0123456789abcdef}}",
    )
    assert result.returncode != 0
    tail = result.stderr[result.stderr.index("nnperf: 1 failed job(s), and why:") :]
    cause = tail.splitlines()[1]
    assert cause.startswith("  nnperf prepare_dataset: error: ")
    assert str(missing) in cause
    assert cause.endswith("[logs/data/cifar10.log]")


def test_report_without_a_path_is_refused_instead_of_landing_in_the_repository(workdir):
    result = run_snakemake(workdir, "--report", cores=None)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        "nnperf: give --report a path: snakemake --report reports/report.html (without one "
        "Snakemake writes report.html into the repository root)"
    )
    assert not (workdir / "report.html").exists()


def test_a_timed_run_without_the_warm_server_measures_too(workdir, monkeypatch):
    """NNPERF_WARM_SERVER=0 (and every non-Linux machine) starts workers with
    multiprocessing's forkserver, whose children import the rule's script again: the
    script must not run its body there."""
    monkeypatch.setenv("NNPERF_WARM_SERVER", "0")
    run = layout.path("run", dataset="synthetic", **KEYS)
    result = run_snakemake(workdir, *SMALL, "--", run)
    assert result.returncode == 0, result.stderr[-3000:]
    document = json.loads((workdir / run).read_text())
    assert document["status"] in ("ok", "over_budget")
    assert document["processes"], document.get("error")
