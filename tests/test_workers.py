"""Worker processes on the CPU: forked warm workers, the budget, and instability flags.

Everything here is real: real processes forked from multiprocessing's fork server, training
a real (tiny) network. A slow step
is a real sleep inside the model's forward pass; a competing load is real busy-looping
processes on every core.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import re
import sys
import time

import pytest
import torch

from nnperf.core.contract import TimingSettings
from nnperf.core.errors import NnperfError
from nnperf.engine import manager, warmserver, worker
from nnperf.engine.runner import perform_run
from tiny_training import tiny_data, tiny_model, tiny_request

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="fork workers and /proc accounting are Linux's"
)


@pytest.fixture(scope="module")
def measured():
    return perform_run(tiny_request("fp32"), tiny_model, tiny_data())


def test_each_process_is_a_separate_forked_worker(measured):
    document, windows, steps = measured
    assert document["start_method"] == "forkserver"
    pids = [record["pid"] for record in document["processes"]]
    assert len(pids) == 2 and len(set(pids)) == 2 and os.getpid() not in pids
    assert [record["seed"] for record in document["processes"]] == [0, 1]
    # Processes of one configuration run one after another, never side by side.
    first, second = document["processes"]
    assert first["ended_at_unix"] <= second["started_at_unix"]
    assert all(record["fixed_cost_s"] > 0 for record in document["processes"])


def test_windows_and_steps_belong_to_their_processes(measured):
    document, windows, steps = measured
    assert [(w["process"], w["window"]) for w in windows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert document["n_processes"] == 2 and document["n_windows"] == 4
    assert len(steps) == 4 * 3
    for window in windows:
        own = [
            s for s in steps if (s["process"], s["window"]) == (window["process"], window["window"])
        ]
        # The per-step marks are shared, so a window's steps add up to its device-timeline
        # time; on the CPU that is the window's wall time up to the closing clock read.
        assert sum(s["step_time_s"] for s in own) == pytest.approx(window["window_s"], rel=0.05)
        assert window["throughput_img_s"] == pytest.approx(24 / window["window_s"])
    # A different seed per process: different initial weights, different losses.
    losses = {p: [s["loss"] for s in steps if s["process"] == p] for p in (0, 1)}
    assert losses[0] != losses[1]


def test_the_estimate_is_the_mean_of_the_process_throughputs(measured):
    document, windows, _ = measured
    rates = [record["throughput_img_s"] for record in document["processes"]]
    assert document["throughput_img_s"] == pytest.approx(sum(rates) / 2)
    assert document["ci_method"] == "processes"
    low, high = document["throughput_img_s_ci95_low"], document["throughput_img_s_ci95_high"]
    assert low < document["throughput_img_s"] < high
    assert document["ci_half_width_rel"] == pytest.approx(
        (high - low) / 2 / document["throughput_img_s"]
    )
    assert document["stop_reason"] == "max_processes"  # a 0.1% target on a shared CPU: caps first
    assert document["ci_target_met"] is (document["ci_half_width_rel"] <= 0.001)
    assert document["variance"]["dominant_level"] in ("process", "window")
    assert 0 < document["duty_cycle"] <= 1


def test_the_same_process_index_reproduces_its_losses():
    first = perform_run(tiny_request("fp32"), tiny_model, tiny_data())[2]
    again = perform_run(tiny_request("fp32"), tiny_model, tiny_data())[2]
    assert [s["loss"] for s in first] == [s["loss"] for s in again]


class SlowLayer(torch.nn.Module):
    """Sleeps in every forward pass: a step of known, long duration."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def forward(self, x):
        time.sleep(self.seconds)
        return x


class BusyLayer(SlowLayer):
    """Spins on the CPU in every forward pass: a long step that uses its core."""

    def forward(self, x):
        end = time.perf_counter() + self.seconds
        while time.perf_counter() < end:
            pass
        return x


class FirstCallSlowLayer(SlowLayer):
    """Sleeps in its first forward pass only: a one-time cost such as cuDNN autotuning."""

    def forward(self, x):
        if self.seconds:
            time.sleep(self.seconds)
            self.seconds = 0.0
        return x


class SlowAfterFirstLayer(SlowLayer):
    """A quick first forward pass, then slow ones: steady steps that cannot fit."""

    calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls > 1:
            time.sleep(self.seconds)
        return x


def _slow_tiny_model(seconds: float, busy: bool = False, kind=None):
    layer = (kind or (BusyLayer if busy else SlowLayer))(seconds)
    return torch.nn.Sequential(layer, tiny_model())


def slow_model(seconds: float):
    """A picklable factory (workers are sent their factory) of a model with slow steps."""
    return functools.partial(_slow_tiny_model, seconds)


def test_hopeless_configuration_ends_over_budget_with_its_step_time():
    # 0.5 s steps; the first is a one-time cost (it predicts nothing), the second is steady:
    # 3 warm-up steps + 2 windows x 4 steps need ~5.5 s of a 4 s budget.
    timing = TimingSettings(min_seconds=0, max_seconds=4.0, min_windows=2)
    request = tiny_request(warmup_steps=3, timed_steps=4, timing=timing)
    started = time.time()
    document, windows, steps = perform_run(request, slow_model(0.5), tiny_data())
    took = time.time() - started
    assert document["status"] == "over_budget" and document["stop_reason"] is None
    assert document["over_budget_phase"] == "steady"
    assert 0.5 <= document["single_step_time_s"] < 1.5  # the sleep, plus a tiny step
    assert document["single_step_time_is_lower_bound"] is False
    # 3 warm-up steps + 2 windows x 4 steps = 11. The verdict comes after the second step
    # (the first steady one) or the third, depending on how busy the machine is.
    assert re.search(r"so the (8|9) steps still needed", document["error"])
    assert "left of timing.max_seconds 4 s" in document["error"] and "\n" not in document["error"]
    assert document["throughput_img_s"] is None and windows == [] and steps == []
    assert document["environment"]["cpu_model"]  # sent before the first step
    assert took < 4.0 + manager.STARTUP_TIMEOUT_S  # it did not wait for the budget's end
    assert (
        document["processes"][0]["ended_at_unix"] - document["processes"][0]["first_step_at_unix"]
        < 3.0 * 1.5
    )  # at most three steps, then the verdict


def test_a_slow_first_step_is_a_one_time_cost_not_the_step_time():
    # A 3 s first step (autotuning, say) ahead of millisecond steps, with a 10 s budget that
    # would allow 1 s a step: the first step has a bound of its own and does not spend the
    # budget; the steps are timed.
    timing = TimingSettings(
        min_seconds=0, max_seconds=10.0, min_windows=2, max_first_step_seconds=20
    )
    request = tiny_request(warmup_steps=3, timed_steps=4, timing=timing)
    model = functools.partial(_slow_tiny_model, 3.0, kind=FirstCallSlowLayer)
    document = perform_run(request, model, tiny_data())[0]
    assert document["status"] == "ok", document["error"]
    assert document["first_step_time_s"] >= 3.0
    assert document["one_time_step_time_s"] == {"first_step": document["first_step_time_s"]}
    assert document["one_time_s"] == document["first_step_time_s"]
    assert document["step_time_s"]["median"] < 1.0 < document["first_step_time_s"]
    assert document["single_step_time_s"] == document["step_time_s"]["median"]


def test_a_first_step_past_its_bound_ends_over_budget_without_a_step_time():
    timing = TimingSettings(min_seconds=0, max_seconds=1.0)
    request = tiny_request(warmup_steps=2, timed_steps=2, timing=timing)
    started = time.time()
    document, _, _ = perform_run(request, slow_model(30.0), tiny_data())
    took = time.time() - started
    assert document["status"] == "over_budget"
    assert document["over_budget_phase"] == "first_step"
    assert document["single_step_time_s"] is None  # a one-time cost is not a step time
    assert "timing.max_first_step_seconds = 1 s" in document["error"]
    assert "the first step (allocation, cuDNN autotuning) took more than" in document["error"]
    assert took < 1.0 + manager.GRACE_S + 5  # not 30 s


def test_a_steady_step_longer_than_the_budget_is_killed_and_reported_as_a_lower_bound():
    timing = TimingSettings(min_seconds=0, max_seconds=1.0)
    request = tiny_request(warmup_steps=2, timed_steps=2, timing=timing)
    started = time.time()
    model = functools.partial(_slow_tiny_model, 30.0, kind=SlowAfterFirstLayer)
    document, _, _ = perform_run(request, model, tiny_data())
    took = time.time() - started
    assert document["status"] == "over_budget" and document["over_budget_phase"] == "steady"
    assert document["single_step_time_is_lower_bound"] is True
    assert document["error"].startswith("over budget: one step takes at least ")
    assert took < 1.0 + manager.GRACE_S + manager.GRACE_SHARE * 1.0 + 5  # not 30 s


def _broken_model():
    raise ValueError("layer config is wrong")


def test_a_worker_failure_fails_the_measurement_with_its_cause():
    with pytest.raises(RuntimeError, match="layer config is wrong"):
        perform_run(tiny_request(), _broken_model, tiny_data())


def test_a_factory_that_cannot_reach_a_worker_is_one_clear_line():
    def local_factory():
        return tiny_model()

    with pytest.raises(NnperfError, match="cannot be sent to a worker process.*module-level"):
        perform_run(tiny_request(), local_factory, tiny_data())


def _busy_loop(stop):
    while not stop.is_set():
        pass


def test_a_busy_loop_on_every_core_flags_the_configuration_unstable():
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    loops = [
        context.Process(target=_busy_loop, args=(stop,), daemon=True) for _ in range(os.cpu_count())
    ]
    for loop in loops:
        loop.start()
    try:
        document, windows, _ = perform_run(tiny_request("fp32"), tiny_model, tiny_data())
    finally:
        stop.set()
        for loop in loops:
            loop.join(5)
    assert document["unstable"] is True
    assert any("host overloaded" in reason for reason in document["unstable_reasons"])
    flagged = [w for w in windows if w["flagged"]]
    assert flagged and all(w["other_cores"] > 0.25 for w in flagged)
    assert all(w["cores"] == os.cpu_count() for w in windows)


def test_process_start_time_is_before_now():
    started = worker.process_started_at_unix()
    assert started is not None and started <= time.time()
    assert time.time() - started < 24 * 3600


def test_the_warm_server_forks_workers_for_every_job_of_a_machine(monkeypatch):
    first = perform_run(tiny_request("fp32"), tiny_model, tiny_data(), method=worker.WARM)[0]
    second = perform_run(tiny_request("fp32"), tiny_model, tiny_data(), method=worker.WARM)[0]
    for document in (first, second):
        assert document["status"] == "ok" and document["start_method"] == "warm_server"
        assert document["n_processes"] == 2
    pids = [p["pid"] for d in (first, second) for p in d["processes"]]
    assert len(set(pids)) == 4 and os.getpid() not in pids
    # Both jobs were served by one server: the same address, alive between them.
    path = warmserver.address(warmserver.identity())
    assert path.exists()


def test_the_warm_server_address_changes_with_what_a_worker_would_see(monkeypatch):
    before = warmserver.address(warmserver.identity())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    assert warmserver.address(warmserver.identity()) != before
    monkeypatch.setenv(warmserver.ENABLE_VARIABLE, "0")
    assert not warmserver.enabled()


def test_a_stale_socket_is_replaced_by_a_new_server(monkeypatch):
    monkeypatch.setenv("NNPERF_TEST_FRESH_SERVER", str(time.time()))  # a fresh identity
    path = warmserver.address(warmserver.identity())
    path.write_text("")  # what a killed server leaves behind
    document = perform_run(tiny_request("fp32"), tiny_model, tiny_data(), method=worker.WARM)[0]
    assert document["status"] == "ok" and document["start_method"] == "warm_server"


def test_a_served_workers_own_cpu_time_is_not_taken_for_a_competing_load():
    """Over budget on a quiet machine: the warm server's worker is not this process's child,
    but its CPU time is the run's own, not another process's load."""
    timing = TimingSettings(min_seconds=0, max_seconds=2.0, min_windows=2)
    request = tiny_request(warmup_steps=3, timed_steps=4, timing=timing)
    busy_model = functools.partial(_slow_tiny_model, 0.5, busy=True)
    document = perform_run(request, busy_model, tiny_data(), method=worker.WARM)[0]
    assert document["status"] == "over_budget"
    assert not any("host loaded" in reason for reason in document["unstable_reasons"])
