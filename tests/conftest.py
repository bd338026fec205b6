"""Shared fixtures: the repository root and a runner for real Snakemake invocations."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

# CI draws the same Hypothesis examples every run: a failure there is a regression, not a new
# random draw; examples Hypothesis found are kept as explicit @example cases.
hypothesis_settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")

REPO = Path(__file__).resolve().parents[1]
TINY_CONFIG = REPO / "tests" / "configs" / "tiny.yaml"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


def snakemake_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    env.setdefault("MPLBACKEND", "Agg")
    return env


def snakemake_command(workdir: Path, *args: str, cores: str | None = "2") -> list[str]:
    """This interpreter's Snakemake on the repository's Snakefile, run in `workdir`."""
    return [
        sys.executable, "-m", "snakemake",
        "--snakefile", str(REPO / "Snakefile"),
        "--directory", str(workdir),
        *(["--cores", cores] if cores else []),
        *args,
    ]


def run_snakemake(
    workdir: Path, *args: str, timeout: int = 900, cores: str | None = "2"
) -> subprocess.CompletedProcess:
    """Run the repository's Snakefile in `workdir` with this interpreter's Snakemake.

    `cores=None` leaves --cores out, as `snakemake --report` is run by hand.
    """
    return subprocess.run(
        snakemake_command(workdir, *args, cores=cores), capture_output=True, text=True, timeout=timeout, env=snakemake_env(), cwd=workdir
    )


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty folder to run the workflow in, with the study configs copied beside it."""
    shutil.copytree(REPO / "config", tmp_path / "config")
    return tmp_path


@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory) -> Path:
    """The whole tiny study (`rule all` on tests/configs/tiny.yaml), run once per session.

    Every stage's workflow test reads its outputs, so the suite pays for one real run.
    Tests must not change what it built; copy the folder to change it.
    """
    workdir = tmp_path_factory.mktemp("tiny_study")
    shutil.copytree(REPO / "config", workdir / "config")
    result = run_snakemake(workdir, "--configfile", str(TINY_CONFIG))
    assert result.returncode == 0, result.stderr[-4000:]
    return workdir
