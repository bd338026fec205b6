"""nnperf used as a Snakemake module from a user's own folder (docs/own-project.md): the
user's Snakefile names nnperf's by path, results land in the user's folder, the config's
relative paths resolve there, nnperf's own files (library, schema, peaks, default study)
come from the checkout, and the checkout is left as it was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import REPO, TINY_CONFIG, snakemake_env
from cifar_archives import build_cifar10_archive

from nnperf.core import devices, layout
from nnperf.report.aggregate import check_no_overlap
from nnperf.study.loading import module_study
from nnperf.study.session import checkout_file

USER_SNAKEFILE = """\
configfile: "config/config.yaml"


module nnperf:
    snakefile:
        "{snakefile}"
    config:
        config


use rule * from nnperf
"""
KEYS = {
    "device": "cpu",
    "model": "resnet18_cifar",
    "precision": "fp32",
    "batch_size": 4,
    "variant": "baseline",
}
# What a run in the user's folder may write into the checkout: nothing here.
OUTPUT_FOLDERS = ("results", "resources", "logs", "reports", ".snakemake")


def user_project(root: Path) -> Path:
    """A user's folder as docs/own-project.md lays it out: a Snakefile in workflow/ using
    nnperf as a module, config/config.yaml (the tiny study, fp32 at batch 4, on a CIFAR-10 archive
    named by a path relative to the folder), the archive under data/."""
    (root / "workflow").mkdir(parents=True)
    (root / "config").mkdir()
    (root / "workflow/Snakefile").write_text(USER_SNAKEFILE.format(snakefile=REPO / "Snakefile"))
    _, md5, _, _ = build_cifar10_archive(root / "data", train_count=40, test_count=8)
    study = yaml.safe_load(TINY_CONFIG.read_text())
    study.update(
        dataset={"name": "cifar10", "source": "data/cifar-10-python.tar.gz", "md5": md5},
        precisions=["fp32"],
        batch_sizes=[4],
        # The default study's `tuned` variant must not come back: variants are replaced whole.
        variants={"baseline": {}},
        convergence={"enabled": False},
    )
    study["timing"]["max_seconds"] = 15
    study["operator_profile"]["enabled"] = False
    (root / "config/config.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    return root


def snakemake_in(folder: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """`snakemake ARGS` typed in `folder`: no --snakefile, no --directory, no profile."""
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=snakemake_env(),
    )


def outputs_in_checkout() -> dict[str, float]:
    """Every file under the checkout's output folders, with its modification time."""
    return {
        str(path.relative_to(REPO)): path.stat().st_mtime
        for folder in OUTPUT_FOLDERS
        if (REPO / folder).exists()
        for path in (REPO / folder).rglob("*")
        if path.is_file()
    }


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.workflow
def test_a_study_in_the_user_s_folder_writes_there_and_leaves_the_checkout_alone(tmp_path):
    project = user_project(tmp_path / "my-project")
    status, outputs = git("status", "--porcelain", "--untracked-files=all"), outputs_in_checkout()

    result = snakemake_in(project, "--cores", "2")
    assert result.returncode == 0, result.stderr[-4000:]

    # The whole study ran (rule all is the default target) and its files are the user's.
    summary = pd.read_csv(project / layout.path("table", dataset="cifar10", name="summary"))
    assert summary[list(KEYS)].to_dict("records") == [KEYS]
    assert summary["status"].tolist() == ["ok"] and summary["dataset"].tolist() == ["cifar10"]
    # No profile here: the workflow's own bench_slot limit kept the measurements apart.
    check_no_overlap(pd.read_csv(project / layout.path("table", dataset="cifar10", name="runs")))
    report = (project / layout.path("summary_md", dataset="cifar10")).read_text()
    assert "tiny test study" in report and "resnet18_cifar" in report
    assert (project / layout.path("summary_html", dataset="cifar10")).is_file()
    assert (project / "logs").is_dir() and (project / ".snakemake").is_dir()

    # dataset.source, relative, was the archive in the user's folder.
    manifest = json.loads((project / "resources/data/cifar10/manifest.json").read_text())
    assert manifest["source"] == "data/cifar-10-python.tar.gz"
    assert manifest["md5"]["verified"] is True and manifest["images"] == {"train": 40, "test": 8}

    # nnperf's own files came from the checkout, and the runs record its commit.
    run = json.loads((project / layout.path("run", dataset="cifar10", **KEYS)).read_text())
    assert run["environment"]["git_commit"] == git("rev-parse", "HEAD").strip()
    assert (REPO / "config/peaks.yaml").as_posix() in (
        project / "results/ceilings/cpu.json"
    ).read_text()

    # The checkout is as it was: no result, log or Snakemake state was written into it.
    assert git("status", "--porcelain", "--untracked-files=all") == status
    assert outputs_in_checkout() == outputs

    # Snakemake's report, from the user's folder: its caption renders with the whole study
    # (report.cv_threshold is the schema's default; the user's config does not name it).
    html = snakemake_in(project, "--report", "reports/report.html")
    assert html.returncode == 0, html.stderr[-3000:]
    page = (project / "reports/report.html").read_text()
    # (The caption travels JSON-escaped inside the page.)
    assert "<strong>tiny test study</strong>" in page and "15 s were spent on it" in page
    assert "(flagged above\\n0.05)" in page


@pytest.mark.workflow
@pytest.mark.skipif(devices.has_cuda_driver(), reason="this machine has a GPU driver")
def test_the_onstart_check_runs_when_nnperf_is_a_module(tmp_path):
    """Snakemake registers `onstart:` from the main Snakefile only; nnperf's still runs."""
    project = user_project(tmp_path / "my-project")
    result = snakemake_in(project, "--cores", "2", "--config", "devices=[cuda]", timeout=120)
    assert result.returncode != 0
    lines = [
        line for line in result.stderr.splitlines() if line.startswith("nnperf: config devices")
    ]
    assert len(lines) == 1 and "device 'cuda' is not available on this machine" in lines[0]
    assert not (project / "results").exists()


def test_the_user_s_config_is_merged_over_the_default_study(tmp_path):
    default = yaml.safe_load((REPO / "config/config.yaml").read_text())
    merged = module_study({"models": ["vgg11_cifar"], "training": {"timed_steps": 7}})
    assert merged["models"] == ["vgg11_cifar"]
    assert merged["training"] == {**default["training"], "timed_steps": 7}
    assert merged["variants"] == default["variants"]
    # A checkout without its default study is one line naming the file.
    with pytest.raises(Exception, match=r"config file '.*config/config.yaml' does not exist"):
        module_study({}, tmp_path)


def test_nnperf_s_own_files_are_relative_only_when_run_in_the_checkout(tmp_path):
    assert checkout_file(REPO, "config/peaks.yaml", REPO) == "config/peaks.yaml"
    assert checkout_file(REPO, "config/peaks.yaml", tmp_path) == str(REPO / "config/peaks.yaml")
