"""Recovery after a kill, done for real as the README's "After a kill or a power loss" says.

A real Snakemake run of a study of two models (tests/configs/tiny.yaml cut to fp32 and one
batch size: the baseline and tuned variants of each) is killed with SIGKILL on its whole process
group, as a `kill -9` of the run or a power cut does: Snakemake gets no chance to clean up.
Then the recipe: the plain rerun refuses, `snakemake --unlock`, the same command with
`--rerun-incomplete`, and a dry run with nothing left to do. Two kill moments leave two
different states, so each has its test:

* during a later configuration's measurement: its files are not written yet, so nothing
  looks finished; its worker (forked by the warm server, outside the killed group) stops by
  itself; the rerun measures that one configuration and keeps the finished one byte for
  byte;
* right after a configuration wrote its files, while its job was still exiting (about a
  second here): the files look finished, but Snakemake marked them incomplete when the job
  started and never got to clear the mark, so a plain rerun refuses and `--rerun-incomplete`
  measures that configuration again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import REPO, TINY_CONFIG, run_snakemake, snakemake_command, snakemake_env

from nnperf.core import layout
from nnperf.engine import warmserver

pytestmark = pytest.mark.workflow

# Keys of the configurations; the variants are tiny.yaml's. One timed_group job measures
# every configuration of a model together; the study has two such groups.
CONFIG = {"dataset": "synthetic", "device": "cpu", "precision": "fp32", "batch_size": 4}
VARIANTS = ("baseline", "tuned")
MODELS = ("resnet18_cifar", "mobilenet_v2_cifar")
RUN_FILES = ("run", "run_windows", "run_steps")  # each configuration's files
# Goes last on every command line (--config takes every argument after it). A budget of
# seconds: a configuration may end over budget, which is still a finished run.
STUDY = (
    "--configfile",
    str(TINY_CONFIG),
    "--config",
    f"models=[{', '.join(MODELS)}]",
    "precisions=[fp32]",
    "batch_sizes=[4]",
    "timing={max_seconds: 4}",
)

POLL_S = 0.05
FAST_POLL_S = 0.005  # the window after a job wrote its files is about a second
KILL_MOMENT_TIMEOUT_S = 240  # from the start to the moment to kill
CALL_TIMEOUT_S = 240  # any one Snakemake call
WORKER_EXIT_TIMEOUT_S = 60  # a worker of a killed job finishes at most its current window


def where(kind: str, **keys) -> Path:
    """`layout.path` given exactly the keys the kind carries (so the test follows the layout)."""
    missing = [name for name in layout.fields(kind) if name not in keys]
    assert not missing, f"the test lacks keys {missing} of path kind {kind!r}"
    return Path(layout.path(kind, **{name: keys[name] for name in layout.fields(kind)}))


def run_paths(variant: str, model: str = MODELS[0]) -> list[Path]:
    return [where(kind, variant=variant, model=model, **CONFIG) for kind in RUN_FILES]


def group_paths(model: str) -> list[Path]:
    """The files of every configuration a group measures."""
    return [path for variant in VARIANTS for path in run_paths(variant, model)]


def group_folder(model: str) -> Path:
    return where("run_group", model=model, batch_sizes=CONFIG["batch_size"], **CONFIG)


def group_measured(model: str) -> Path:
    """The group's comparisons, written last by its job: the measurement is complete. (The
    per-configuration copies, `group_paths`, come from timed_run jobs that Snakemake may
    schedule only after the next group has measured.)"""
    return group_folder(model) / layout.GROUP_COMPARISONS


def group_log(model: str) -> Path:
    """The timed_group job's log: opened when the job starts."""
    keys = {"model": model, "batch_sizes": CONFIG["batch_size"], **CONFIG}
    return Path(layout.log("run_group", **{n: keys[n] for n in layout.fields("run_group")}))


def fingerprint(root: Path) -> dict[str, str]:
    """SHA-256 of every file under results/."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted((root / "results").rglob("*"))
        if path.is_file()
    }


def snakemake(study: Path, target: Path, *flags: str) -> subprocess.CompletedProcess:
    """One foreground call of the same command as the killed run, plus `flags`."""
    return run_snakemake(study, str(target), *flags, *STUDY, timeout=CALL_TIMEOUT_S)


def output(result: subprocess.CompletedProcess) -> str:
    return result.stdout + result.stderr


def start_snakemake(study: Path, target: Path, log: Path) -> subprocess.Popen:
    """The run to kill, in its own process group as a terminal would start it."""
    command = snakemake_command(study, str(target), *STUDY)
    with open(log, "w") as handle:
        return subprocess.Popen(
            command,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=snakemake_env(),
            cwd=study,
            start_new_session=True,
        )


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL to Snakemake and every job it started (its process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def wait_for(condition, process: subprocess.Popen, log: Path, what: str, poll_s: float = POLL_S):
    """Poll `condition` until it returns something true; fail if Snakemake ends first."""
    deadline = time.monotonic() + KILL_MOMENT_TIMEOUT_S
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        if process.poll() is not None:
            pytest.fail(
                f"snakemake ended (exit {process.returncode}) before {what}:\n"
                + log.read_text()[-3000:]
            )
        time.sleep(poll_s)
    pytest.fail(f"no {what} within {KILL_MOMENT_TIMEOUT_S} s:\n" + log.read_text()[-3000:])


def processes_in(folder: Path) -> dict[int, tuple[int, int]]:
    """pid -> (process group, session) of every live process working in `folder` (/proc)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            if Path(os.readlink(entry / "cwd")) == folder:
                found[pid] = (os.getpgid(pid), os.getsid(pid))
        except OSError:  # exited meanwhile, a zombie, or not ours to read
            continue
    return found


def warm_workers(study: Path, group: int) -> list[int]:
    """Workers the warm fork server forked for this study's jobs.

    The server starts its own session (it outlives the job that started it), so neither it
    nor its workers are in Snakemake's process group: a kill of the group does not reach
    them. A worker is the server's child: in the server's group but not its leader.
    """
    return [pid for pid, (pgid, sid) in processes_in(study).items() if pgid != group and pid != sid]


def new_study(tmp_path: Path) -> Path:
    study = tmp_path / "study"
    shutil.copytree(REPO / "config", study / "config")
    return study.resolve()


def test_kill_9_during_a_measurement_loses_only_that_group(tmp_path):
    study = new_study(tmp_path)
    target = where("table", name="summary", dataset=CONFIG["dataset"])
    log = tmp_path / "killed_run.log"
    watch_workers = warmserver.enabled() and Path("/proc/self/cwd").exists()

    def one_finished_and_a_later_one_measuring():
        finished = [m for m in MODELS if (study / group_measured(m)).exists()]
        started = [m for m in MODELS if (study / group_log(m)).exists()]
        measuring = [m for m in started if m not in finished]
        if not (finished and measuring):
            return None
        # With the warm server, wait for the worker that runs the measurement itself.
        workers = warm_workers(study, process.pid) if watch_workers else []
        if watch_workers and not workers:
            return None
        return finished[0], measuring[0], workers

    process = start_snakemake(study, target, log)
    try:
        finished, killed, workers = wait_for(
            one_finished_and_a_later_one_measuring,
            process,
            log,
            "finished group and a later one measuring",
        )
        kill_group(process)
    finally:
        if process.poll() is None:
            kill_group(process)

    # Nothing of the killed measurement looks finished; the finished one is all there.
    assert [p for p in group_paths(killed) if (study / p).exists()] == []
    assert not (study / group_measured(killed)).exists()
    before = fingerprint(study)
    assert str(group_measured(finished)) in before
    # The killed job's worker is outside the killed group; it must notice and stop, not keep
    # measuring beside the rerun's measurement.
    deadline = time.monotonic() + WORKER_EXIT_TIMEOUT_S
    while set(workers) & set(warm_workers(study, process.pid)):
        assert time.monotonic() < deadline, f"workers {workers} of the killed job kept running"
        time.sleep(0.2)

    # The recipe. A plain rerun refuses, naming the lock and the way out.
    refused = snakemake(study, target)
    assert refused.returncode != 0
    assert "LockException" in output(refused) and "--unlock" in output(refused)
    unlocked = snakemake(study, target, "--unlock")
    assert unlocked.returncode == 0, output(unlocked)[-3000:]
    assert "Unlocked working directory" in output(unlocked)
    # What is left: the killed configuration and what depends on it.
    left = snakemake(study, target, "--dry-run", "--rerun-incomplete", "--quiet", "rules")
    assert left.returncode == 0, output(left)[-3000:]
    assert "timed_group" in left.stdout and "aggregate_runs" in left.stdout
    rerun = snakemake(study, target, "--rerun-incomplete")
    assert rerun.returncode == 0, output(rerun)[-4000:]

    after = fingerprint(study)
    assert {name: after[name] for name in before} == before  # finished: not redone
    for model in MODELS:
        for variant in VARIANTS:
            document = json.loads((study / run_paths(variant, model)[0]).read_text())
            assert (document["variant"], document["model"]) == (variant, model)
            assert document["status"] in ("ok", "over_budget"), document["error"]
    summary = (study / target).read_text()
    assert all(variant in summary for variant in VARIANTS)
    done = snakemake(study, target, "--dry-run")
    assert done.returncode == 0, output(done)[-3000:]
    assert "Nothing to be done" in output(done)


def test_kill_9_after_a_run_wrote_its_files_leaves_them_marked_incomplete(tmp_path):
    study = new_study(tmp_path)
    # The measuring job's folder: its comparisons are the last file it writes.
    target = group_folder(MODELS[0])
    json_path = target / "fp32_baseline.json"
    last = target / "comparisons.json"
    csv_paths = [target / "fp32_baseline_windows.csv", target / "fp32_baseline_steps.csv"]
    log = tmp_path / "killed_run.log"

    process = start_snakemake(study, target, log)
    try:
        wait_for((study / last).exists, process, log, str(last), FAST_POLL_S)
        kill_group(process)  # at once: the job is still exiting, Snakemake has not noted it
    finally:
        if process.poll() is None:
            kill_group(process)

    # The files look finished: all there, the JSON whole.
    written = json.loads((study / json_path).read_text())
    assert written["variant"] == "baseline" and written["status"] in ("ok", "over_budget")
    assert all((study / p).stat().st_size > 0 for p in csv_paths)
    before = fingerprint(study)

    # Snakemake knows better: the incomplete marker from the job's start is still there,
    # and it is checked before the lock.
    refused = snakemake(study, target)
    assert refused.returncode != 0
    message = output(refused)
    assert "IncompleteFilesException" in message, (
        "the kill came after Snakemake recorded the job as done:\n" + message[-3000:]
    )
    assert str(target) in message and "--rerun-incomplete" in message
    locked = snakemake(study, target, "--rerun-incomplete")
    assert locked.returncode != 0
    assert "LockException" in output(locked) and "--unlock" in output(locked)
    assert fingerprint(study) == before  # refusing touched nothing

    unlocked = snakemake(study, target, "--unlock")
    assert unlocked.returncode == 0, output(unlocked)[-3000:]
    left = snakemake(study, target, "--dry-run", "--rerun-incomplete", "--quiet", "rules")
    assert left.returncode == 0, output(left)[-3000:]
    assert "timed_group" in left.stdout
    rerun = snakemake(study, target, "--rerun-incomplete")
    assert rerun.returncode == 0, output(rerun)[-4000:]

    # Measured again, not trusted: a later run with the same request.
    remeasured = json.loads((study / json_path).read_text())
    assert remeasured["started_at_unix"] > written["ended_at_unix"]
    assert remeasured["variant"] == "baseline"
    assert remeasured["status"] in ("ok", "over_budget"), remeasured["error"]
    done = snakemake(study, target, "--dry-run")
    assert done.returncode == 0, output(done)[-3000:]
    assert "Nothing to be done" in output(done)
