"""A corrupt checkpoint in the workflow's resume: one warning line naming it, the run carries
on from the newest checkpoint that loads, and no valid file is deleted.

A real training run of a registry model at toy size (resnet18_cifar on 32 synthetic
images, one epoch, one thread) writes last.pt, best.pt and final.pt; the test then cuts
last.pt short, as a full disk or a kill during a copy would, removes final.pt (a job killed
before the run ended has none) and runs the rule's resume again, inside `logged_job` as
the rule's script does.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from nnperf.core.contract import ConvergenceSettings, TrainingRunRequest
from nnperf.core.jobs import logged_job
from nnperf.training import checkpoints
from nnperf.training import to_accuracy as convergence
from test_to_accuracy import ONE_THREAD, prepared, restore_threads  # noqa: F401


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def run(prepared) -> TrainingRunRequest:  # noqa: F811 - the fixture imported above
    return TrainingRunRequest(
        device="cpu",
        model="resnet18_cifar",
        precision="fp32",
        batch_size=16,
        settings=ONE_THREAD,
        convergence=ConvergenceSettings(epochs=1, target_accuracy=None, warmup_epochs=0.0),
        data_root=str(prepared),
    )


def test_a_truncated_last_pt_resumes_from_best_pt_and_says_so_on_the_terminal(run, tmp_path, capfd):
    folder = tmp_path / "checkpoints"
    outputs = (tmp_path / "s.json", tmp_path / "e.csv", folder)
    first = convergence.train_to_files(run, *outputs, resume=convergence.RESUME_MATCHING)
    assert first["status"] == "ok" and first["epochs_run"] == 1
    last, best = folder / "last.pt", folder / "best.pt"
    assert checkpoints.load(best)["epoch"] == 1
    best_before = digest(best)
    last.write_bytes(last.read_bytes()[:1000])
    (folder / "final.pt").unlink()
    capfd.readouterr()

    log = tmp_path / "train.log"
    with logged_job(log, "train_to_accuracy"):
        again = convergence.train_to_files(run, *outputs, resume=convergence.RESUME_MATCHING)

    # Resumed from best.pt's epoch, which is the run's last: nothing is trained again.
    assert again["resumed_from"] == {"path": str(best), "epoch": 1}
    assert again["epochs_run"] == 1
    assert digest(best) == best_before
    # The corrupt file is kept aside, not deleted, and no longer a candidate.
    assert (folder / "last.pt.corrupt").stat().st_size == 1000
    assert checkpoints.load(folder / "final.pt")["epoch"] == 1
    # One line on the terminal (the job's real stderr), naming the file; the same in the log.
    terminal = [line for line in capfd.readouterr().err.splitlines() if "warning:" in line]
    assert len(terminal) == 1, terminal
    line = terminal[0]
    assert line.startswith("warning: resnet18_cifar cpu fp32 bs16 ")
    assert f"{last}: not a readable checkpoint, truncated or corrupt" in line
    assert f"renamed to last.pt.corrupt; resuming from {best} (epoch 1)" in line
    assert line in log.read_text(encoding="utf-8").splitlines()


def test_only_corrupt_checkpoints_start_over_and_keep_the_files(run, tmp_path, capfd):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    (folder / "last.pt").write_bytes(b"PK\x03\x04 cut short")
    (folder / "best.pt").write_bytes(b"")
    capfd.readouterr()
    summary = convergence.train_to_files(
        run,
        tmp_path / "s.json",
        tmp_path / "e.csv",
        folder,
        resume=convergence.RESUME_MATCHING,
    )
    assert summary["resumed_from"] is None and summary["epochs_run"] == 1
    assert (folder / "last.pt.corrupt").read_bytes() == b"PK\x03\x04 cut short"
    assert (folder / "best.pt.corrupt").read_bytes() == b""
    assert checkpoints.load(folder / "last.pt")["epoch"] == 1
    warnings = [line for line in capfd.readouterr().err.splitlines() if "warning:" in line]
    assert len(warnings) == 2, warnings
    assert all(
        line.endswith("no other checkpoint of this run loads: starting over") for line in warnings
    )
    assert {"last.pt.corrupt", "best.pt.corrupt"} == {
        name for line in warnings for name in ("last.pt.corrupt", "best.pt.corrupt") if name in line
    }
