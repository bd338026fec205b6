"""Compared configurations sharing a worker process, their windows taking turns
(nnperf.engine.sharing): which may share, the real worker protocol with several trainings,
the budgets and pairing through the real engine on a fake clock, and a shared process lost."""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import sys

import numpy as np
import pytest

from nnperf.core import ratios
from nnperf.core.contract import RunRequest, TimingSettings, TrainingSettings
from nnperf.core.errors import NnperfError
from nnperf.core.jobs import logged_job
from nnperf.core.variant import parse_variant_settings, sharing_key
from nnperf.engine import interleave, processes, rehearsal, sharing, warmprotocol
from nnperf.engine.worker import WorkerJob
from tiny_training import TINY_TIMING, tiny_data, tiny_model, tiny_request

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="fork workers are Linux's"
)


def _key(precision="fp32", device="cpu", **settings):
    return sharing_key(device, precision, parse_variant_settings(settings))


def test_what_may_share_a_process():
    plain = _key()
    # Per model, optimizer or feeder: free to differ.
    assert plain == _key(channels_last=True, optimizer_impl="foreach")
    assert plain == _key(data_path="device_resident") == _key("bf16") == _key("fp16")
    # Process-wide switches must be alike.
    assert plain != _key("tf32", device="cuda") and _key(device="cuda") != plain
    assert plain != _key(cpu_threads=1) and plain != _key(cudnn_benchmark=True)
    # Never shared.
    assert _key(compile="default") is None and _key(num_workers=2) is None


def test_a_group_shares_by_key_and_keeps_the_rest_alone():
    base = tiny_request()
    requests = [
        base,
        tiny_request("bf16"),
        tiny_request(variant="compiled", settings={"compile": "default"}),
        tiny_request(variant="threads", settings={"cpu_threads": 1}),
        tiny_request(variant="tuned", settings={"channels_last": True}),
    ]
    assert sharing.sharing_units(requests, [0, 1, 2, 3, 4]) == [[0, 1, 4], [2], [3]]
    assert sharing.sharing_units(requests, [2, 4]) == [[2], [4]]


def test_the_pairing_rounds_are_the_shared_ones_where_there_are_enough():
    alone = {0: [], 1: [], 2: []}
    assert ratios.pairing_rounds(alone, alone, "a", "b") == ([0, 1, 2], "process")
    a = {0: [], 1: ["b"], 2: ["b"], 3: ["b", "c"]}
    b = {0: [], 1: ["a"], 2: ["a"], 3: ["a"], 4: []}
    assert ratios.pairing_rounds(a, b, "a", "b") == ([1, 2, 3], "window")
    # One shared round makes no interval: the rounds in common stand.
    assert ratios.pairing_rounds({0: [], 1: ["b"]}, {0: [], 1: ["a"]}, "a", "b") == (
        [0, 1],
        "process",
    )


def test_a_shared_job_crosses_the_warm_server_protocol_and_a_bad_one_is_refused():
    first, second = tiny_request(), tiny_request("bf16")
    job = WorkerJob(first, 3, False, partners=((second, 2),))
    message = warmprotocol.job_message(job, "/tmp")
    rebuilt, cwd = warmprotocol.job_from_message(message)
    assert cwd == "/tmp" and rebuilt.members() == [(first, 3), (second, 2)]
    assert "partners" not in warmprotocol.job_message(WorkerJob(first, 0, True), "/tmp")
    with pytest.raises(NnperfError, match="partners must be"):
        warmprotocol.job_from_message({**message, "partners": [["x"]]})


# --- real workers ----------------------------------------------------------------------

TIMING = dataclasses.replace(TINY_TIMING, max_processes=3)


def _members():
    return [
        tiny_request("fp32", timing=TIMING),
        tiny_request("bf16", timing=TIMING),
        tiny_request("fp32", variant="tuned", settings={"channels_last": True}, timing=TIMING),
    ]


@linux_only
def test_members_share_a_real_worker_process_from_the_second_round_on():
    requests = _members()
    group = interleave.run_group(
        requests, method="forkserver", model_factory=tiny_model, data=tiny_data()
    )
    names = ["fp32_baseline", "bf16_baseline", "fp32_tuned"]
    for name, measurement in zip(names, group.measurements):
        assert measurement.status == "ok"
        first, *later = measurement.processes
        # Process 0 is its own; the others were shared with both partners.
        assert first["round"] == 0 and not first.get("shared_with")
        assert first["peak_memory_host_bytes"] > 0
        assert [p["round"] for p in later] == [1, 2]
        for record in later:
            assert sorted(record["shared_with"]) == sorted(set(names) - {name})
            assert record["status"] == "ok" and record["optimizer_impl"]
            # Memory in a shared process is not one member's own.
            assert record["peak_memory_host_bytes"] is None
            assert record["waited_s"] >= 0
        # Each member's windows are its own, at its own process index, 2 per process.
        assert [w["process"] for w in measurement.windows] == [0, 0, 1, 1, 2, 2]
        # While the partners trained, its budget was paused.
        assert measurement.paused_s > 0
    pids = {p["pid"] for m in group.measurements for p in m.processes if p["round"] == 1}
    assert len(pids) == 1
    # The windows of a shared process took turns: each member's second window started after
    # some partner's first ended.
    starts = sorted(
        (w["started_at_unix"], i)
        for i, m in enumerate(group.measurements)
        for w in m.windows
        if w["process"] == 1
    )
    assert len({i for _, i in starts[:3]}) == 3
    for row in group.comparisons:
        assert row["grain"] == "window" and row["ratio_n"] == 2


@linux_only
def test_the_pairing_setting_process_keeps_every_process_its_own():
    requests = [
        dataclasses.replace(r, timing=dataclasses.replace(TIMING, pairing="process"))
        for r in _members()[:2]
    ]
    group = interleave.run_group(
        requests, method="forkserver", model_factory=tiny_model, data=tiny_data()
    )
    pids = [p["pid"] for m in group.measurements for p in m.processes]
    assert len(set(pids)) == len(pids) == 6
    assert group.comparisons[0]["grain"] == "process"


@linux_only
def test_a_shared_process_killed_is_measured_again_alone_and_the_group_goes_on_alone(tmp_path):
    start = processes.worker_starter("forkserver")
    killed = []

    def start_worker(job):
        worker = start(job)
        if job.partners and not killed:
            os.kill(worker.pid, signal.SIGKILL)
            killed.append(worker.pid)
        return worker

    requests = _members()[:2]
    with logged_job(tmp_path / "timed_group.log", "timed_group"):
        group = interleave.run_group(
            requests,
            method="forkserver",
            start_worker=start_worker,
            start_shared=sharing.shared_starter(start_worker),
            model_factory=tiny_model,
            data=tiny_data(),
        )
    assert len(killed) == 1
    for measurement in group.measurements:
        assert measurement.status == "ok"
        (loss,) = measurement.worker_losses
        assert (loss["process"], loss["round"]) == (1, 1)
        # Measured again alone in round 1, and alone after: no process is shared.
        assert [p["round"] for p in measurement.processes] == [0, 1, 2]
        assert not any(p.get("shared_with") for p in measurement.processes)
    assert "a new process takes its place" in (tmp_path / "timed_group.log").read_text()


# --- the engine on a fake clock --------------------------------------------------------

FAKE_TIMING = TimingSettings(
    target_ci=0.001,
    min_seconds=1,
    max_seconds=40,
    max_processes=12,
    min_windows=2,
    max_windows=2,
    disturbed_windows="keep",
)
BASE = RunRequest(
    device="cpu",
    model="m",
    precision="fp32",
    batch_size=32,
    training=TrainingSettings(warmup_steps=3, timed_steps=4),
    timing=FAKE_TIMING,
)
TUNED = dataclasses.replace(BASE, variant="tuned")
SPEEDUP = 1.05


class BusyHostWorker(rehearsal.ReplayWorker):
    """A replayed worker on a host whose capacity changes over seconds (the process level
    of a CPU VM, benchmarks/noise_timescales.py): every 3 s of the fake clock have their own
    speed, the same for every process running in them."""

    speeds = np.exp(np.random.default_rng(7).normal(0.0, 0.12, 4000))

    def _window_event(self):
        second = int((self.clock() - rehearsal.CLOCK_START_UNIX) / 3)
        steady = self.process
        self.process = dataclasses.replace(
            steady, steady_step_s=steady.steady_step_s / self.speeds[second]
        )
        try:
            return super()._window_event()
        finally:
            self.process = steady


def _fake_engine(pairing: str):
    clock, rng = rehearsal.FakeClock(), np.random.default_rng(1)
    step = {"baseline": 0.1, "tuned": 0.1 / SPEEDUP}
    timings = {
        variant: rehearsal.ConfigTiming(
            processes=(rehearsal.ProcessTiming(s, 0.002, (s, s, s), start_s=1.0),),
            source="test",
        )
        for variant, s in step.items()
    }

    def start_worker(job):
        return BusyHostWorker(job, timings[job.request.variant], clock, rng)

    def start_shared(jobs):
        # Replayed members of one process: each replays its timings on the one clock, so
        # every turn takes the time it took.
        return [start_worker(job) for job in jobs]

    timing = dataclasses.replace(FAKE_TIMING, pairing=pairing)
    requests = [dataclasses.replace(r, timing=timing) for r in (TUNED, BASE)]
    engine = {"method": "replay", "clock": clock, "watch_host": False}
    group = interleave.run_group(
        requests, start_worker=start_worker, start_shared=start_shared, **engine
    )
    return group, clock


def _paired_logs(group) -> np.ndarray:
    members = [
        interleave.Member(name, m)
        for name, m in zip(["fp32_tuned", "fp32_baseline"], group.measurements)
    ]
    return np.asarray(interleave.paired_log_ratios(*members))


def test_window_turns_cancel_a_host_that_changes_by_the_second_where_process_pairs_cannot():
    window, _ = _fake_engine("window")
    process, _ = _fake_engine("process")
    (shared,), (alone,) = window.comparisons, process.comparisons
    assert (shared["grain"], alone["grain"]) == ("window", "process")
    spread_window, spread_process = (np.std(_paired_logs(g), ddof=1) for g in (window, process))
    assert spread_window < 0.4 * spread_process
    # The window grain resolves the 5% speedup in a few rounds, its interval holding the
    # truth; process pairs, over more rounds, still cannot tell it from a tie.
    assert shared["verdict"] == "faster" and window.rounds < process.rounds
    assert shared["ratio_ci_low"] < SPEEDUP < shared["ratio_ci_high"]
    assert alone["verdict"] in ("unresolved", ratios.OUT_OF_REACH)
    assert alone["ratio_ci_low"] < 1 < alone["ratio_ci_high"]


def test_each_member_of_a_shared_process_spends_only_its_own_turns():
    group, _ = _fake_engine("window")
    tuned, base = group.measurements
    assert all(p.get("shared_with") for m in (tuned, base) for p in m.processes[1:])
    # Every second of the group is one member's: each spent about half of it, and together
    # all of it but what no budget counts (a member's start before its budget's clock, and
    # process 0's one-time steps).
    span = max(m.ended_at_unix for m in (tuned, base)) - min(
        m.budget_start_unix for m in (tuned, base)
    )
    spent = [
        m.ended_at_unix - m.budget_start_unix - m.paused_s - m.one_time_s - m.loader_s
        for m in (tuned, base)
    ]
    assert all(0.35 * span < s < 0.55 * span for s in spent)
    assert sum(spent) > 0.9 * span


def test_a_member_past_its_deadline_ends_the_shared_process_and_its_partner_goes_on():
    clock, rng = rehearsal.FakeClock(), np.random.default_rng(1)
    fast = rehearsal.ProcessTiming(0.1, 0.002, (0.1, 0.1, 0.1), start_s=1.0)
    # The tuned member's second process hangs: a step far past any deadline.
    hung = dataclasses.replace(fast, steady_step_s=1000.0)
    timings = {
        "baseline": rehearsal.ConfigTiming(processes=(fast,), source="test"),
        "tuned": rehearsal.ConfigTiming(processes=(fast, hung, fast), source="test"),
    }

    def start_worker(job):
        return rehearsal.ReplayWorker(job, timings[job.request.variant], clock, rng)

    group = interleave.run_group(
        [TUNED, BASE],
        start_worker=start_worker,
        start_shared=lambda jobs: [start_worker(job) for job in jobs],
        method="replay",
        clock=clock,
        watch_host=False,
    )
    tuned, base = group.measurements
    # The hung member stopped at its budget, as it would alone.
    assert tuned.processes[1]["status"] == "killed" and tuned.stop_reason == "budget"
    assert "process_stopped_at_budget" in [code for code, _ in tuned.notes]
    # Its partner's process ended with it, with what it had measured; it went on alone.
    shared_round = base.processes[1]
    assert shared_round["status"] == "killed" and shared_round.get("shared_with")
    assert len(base.processes) > 2 and base.status == "ok"
    assert not any(p.get("shared_with") for p in base.processes[2:])


@linux_only
def test_an_imagefolder_group_shares_a_process_loading_its_split_once_by_name(tmp_path):
    """The worker reads the user's ImageFolder and builds the registry's model by name for
    the first member, and hands both to the others: a group has one model and dataset."""
    from nnperf.core import contract
    from nnperf.workload import datasets
    from imagefolder_data import make_imagefolder

    folder = make_imagefolder(tmp_path / "photos", train_per_class=6, val_per_class=1)
    dataset = contract.DatasetSettings(name="imagefolder", path=os.fspath(folder), image_size=32)
    root = tmp_path / "resources/data" / dataset.key
    datasets.prepare(contract.DatasetRequest(root=os.fspath(root), dataset=dataset))
    requests = [
        dataclasses.replace(
            request,
            model="resnet18_cifar",
            dataset=dataset.key,
            data_root=os.fspath(root),
            image_size=32,
            input_size=32,
        )
        for request in _members()[:2]
    ]
    group = interleave.run_group(requests, method="forkserver")
    for measurement in group.measurements:
        assert measurement.status == "ok"
        assert measurement.data_info["num_classes"] == 3
        assert [bool(p.get("shared_with")) for p in measurement.processes] == [False, True, True]
    assert group.comparisons[0]["grain"] == "window"
