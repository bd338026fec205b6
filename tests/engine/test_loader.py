"""The loader's own rate, measured in the real worker processes of a timed run (on the CPU,
tiny model): loader windows after the timed windows, their drain, their CI, their time kept
out of the training budget; and an ImageFolder of large JPEGs decoded with no DataLoader
workers, which the rule calls input-bound."""

from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
import pytest

from imagefolder_data import make_imagefolder
from nnperf.core import contract
from nnperf.core.contract import TimingSettings
from nnperf.engine import loader, rehearsal, worker
from nnperf.engine.runner import perform_run
from nnperf.report.input_verdict import DATA_WAIT_LIMIT, INPUT_BOUND, summary_columns
from tiny_training import tiny_data, tiny_model, tiny_request

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="fork workers and /proc accounting are Linux's"
)


@pytest.fixture(scope="module")
def measured():
    return perform_run(tiny_request("fp32", timed_steps=3), tiny_model, tiny_data())


def test_every_process_times_its_feeder_alone_after_its_windows(measured):
    document, windows, _ = measured
    rows = document["loader_windows"]
    assert [(r["process"], r["window"]) for r in rows] == [
        (p, w) for p in (0, 1) for w in range(loader.WINDOWS_PER_PROCESS)
    ]
    for row in rows:
        # As many batches as a timed window, of the run's batch size.
        assert (row["batches"], row["images"]) == (3, 8 * 3)
        assert row["loader_rate_img_s"] == pytest.approx(row["images"] / row["window_s"])
        assert (row["drained_batches"], row["drain_s"]) == (0, 0.0)  # no DataLoader workers
        # After that process's last timed window.
        last = max(w["ended_at_unix"] for w in windows if w["process"] == row["process"])
        assert row["started_at_unix"] >= last
    for record in document["processes"]:
        assert record["n_loader_windows"] == loader.WINDOWS_PER_PROCESS
        assert record["loader_rate_img_s"] > 0


def test_the_loader_rate_has_a_two_level_interval_like_throughput(measured):
    document, _, _ = measured
    rates = [record["loader_rate_img_s"] for record in document["processes"]]
    assert document["loader_rate_img_s"] == pytest.approx(sum(rates) / 2)
    assert document["loader_ci_method"] == "processes"
    assert (document["loader_n_processes"], document["loader_n_windows"]) == (2, 6)
    low, high = document["loader_rate_img_s_ci95_low"], document["loader_rate_img_s_ci95_high"]
    assert low < document["loader_rate_img_s"] < high
    # The loader alone draws and prepares batches; training does that and a whole step more.
    assert document["loader_rate_img_s"] > document["throughput_img_s"]
    assert 0 < document["data_wait_share"] < 1
    # Its time is recorded and stays within its share of the budget (plus one window: the
    # first is always run).
    longest = max(loader.window_cost_s(r) for r in document["loader_windows"])
    assert (
        0
        < document["loader_time_s"]
        <= loader.allowance_s(TimingSettings(max_seconds=60)) + longest
    )
    # The timed windows are the training's alone.
    assert document["n_windows"] == 4 and document["images_timed"] == 4 * 24


def test_a_dataloader_with_workers_drains_its_ready_batches_first():
    request = tiny_request("fp32", {"num_workers": 2}, timed_steps=2)
    document, _, _ = perform_run(request, tiny_model, tiny_data())
    assert document["status"] == "ok"
    drained = [
        (r["process"], r["window"], r["drained_batches"]) for r in document["loader_windows"]
    ]
    # Two workers x torch's default prefetch of 2, once per process, before its first window.
    assert drained == [(p, w, 4 if w == 0 else 0) for p in (0, 1) for w in range(3)]
    assert all(r["drain_s"] > 0 for r in document["loader_windows"] if r["window"] == 0)


class LoaderReplayWorker(rehearsal.ReplayWorker):
    """A replayed worker whose loader windows take `LOADER_WINDOW_S` of the fake clock."""

    LOADER_WINDOW_S = 0.5

    def send(self, command: str) -> None:
        if command != "loader":
            return super().send(command)
        images = self.request.batch_size * self.request.training.timed_steps
        row = {
            "process": self.index,
            "window": sum(1 for p in self.pending if p[1][0] == "loader"),
            "batches": self.request.training.timed_steps,
            "images": images,
            "window_s": self.LOADER_WINDOW_S,
            "loader_rate_img_s": images / self.LOADER_WINDOW_S,
            "drained_batches": 0,
            "drain_s": 0.0,
        }
        self.pending.append((self.LOADER_WINDOW_S, ("loader", row)))


def replayed(request, timing, worker_class):
    clock = rehearsal.FakeClock()
    rng = np.random.default_rng(0)

    def start_worker(job: worker.WorkerJob):
        return worker_class(job, timing, clock, rng)

    return perform_run(
        request, method="replay", clock=clock, start_worker=start_worker, watch_host=False
    )[0]


def test_loader_windows_are_not_taken_from_the_training_budget():
    """The same replayed configuration with loader windows of half a second each and with
    none: the same processes, windows and stop reason; only the loader's time is added."""
    timing = rehearsal.ConfigTiming(
        processes=(
            rehearsal.ProcessTiming(steady_step_s=0.1, step_cv=0.05, start_s=1.0),
            rehearsal.ProcessTiming(steady_step_s=0.104, step_cv=0.05, start_s=1.0),
        ),
        source="test",
    )
    request = tiny_request(
        "fp32",
        timed_steps=10,
        timing=TimingSettings(
            target_ci=0.001,
            min_seconds=0,
            max_seconds=12,
            min_processes=2,
            max_processes=20,
            disturbed_windows="keep",  # a test runner is never quiet (tests/configs/tiny.yaml)
        ),
    )
    plain = replayed(request, timing, rehearsal.ReplayWorker)
    loaded = replayed(request, timing, LoaderReplayWorker)
    assert plain["loader_n_windows"] == 0 and plain["loader_rate_img_s"] is None
    assert summary_columns(plain)["input_bound"] == "undetermined"
    for key in ("n_processes", "n_windows", "stop_reason", "throughput_img_s"):
        assert loaded[key] == plain[key], key
    # At most a tenth of max_seconds (1.2 s: 0.5 + 0.5, the third would pass it).
    assert loaded["loader_n_windows"] == 2
    assert loaded["loader_time_s"] == pytest.approx(1.0)
    assert loaded["elapsed_s"] == pytest.approx(plain["elapsed_s"] + 1.0)


def test_large_jpegs_decoded_without_workers_make_a_configuration_input_bound(tmp_path):
    """An ImageFolder of 1024x768 JPEGs, decoded and cropped in the training process every
    step, feeding a tiny model at 32 pixels: the step waits on the decoder."""
    from nnperf.engine.build import load_run_data
    from nnperf.workload import datasets, imagefolder

    folder = tmp_path / "big"
    make_imagefolder(folder, train_per_class=6, val_per_class=1)
    rng = np.random.default_rng(1)
    from PIL import Image

    for path in sorted((folder / "train").rglob("*.*")):
        pixels = rng.integers(0, 256, size=(768, 1024, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(path.with_suffix(".jpg"), quality=95)
        if path.suffix != ".jpg":
            path.unlink()
    dataset = contract.DatasetSettings(name="imagefolder", path=os.fspath(folder), image_size=32)
    root = tmp_path / "resources/data" / dataset.key
    datasets.prepare(contract.DatasetRequest(root=os.fspath(root), dataset=dataset))
    request = dataclasses.replace(
        tiny_request("fp32", batch_size=8, timed_steps=2),
        dataset=dataset.key,
        data_root=os.fspath(root),
        image_size=32,
        input_size=32,
    )
    # The folder's split and statistics as a worker reads them; the model is the tiny one.
    data, _ = load_run_data(dataclasses.replace(request, model="resnet18_cifar"))
    assert isinstance(data.images, imagefolder.Split)
    data = dataclasses.replace(data, num_classes=10)
    document, _, _ = perform_run(request, tiny_model, data)
    assert document["status"] == "ok"
    columns = summary_columns(document)
    assert columns["input_bound"] == INPUT_BOUND
    assert document["data_wait_share"] > DATA_WAIT_LIMIT
    # The loader was timed in both processes. Its rate is close to the training rate here
    # (the step is almost all decoding), too close for a busy host to order the two.
    assert document["loader_n_processes"] == 2 and columns["loader_headroom"] > 0
