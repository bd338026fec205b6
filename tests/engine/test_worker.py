"""Worker processes on the CPU: forked warm workers, the budget, and instability flags.

Everything here is real: real processes forked from multiprocessing's fork server, training
a real (tiny) network, and from the warm server (a registered model on a prepared synthetic
set, as a job's workers load them by name). A slow step is a real sleep inside the model's
forward pass; a competing load is real busy-looping processes on every core; a native crash
is a real segfault or GNU OpenMP giving up.
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from nnperf.core.contract import TimingSettings
from nnperf.core.errors import NnperfError
from nnperf.core.jobs import logged_job
from nnperf.engine import driver, manager, processes, stability, warmserver, worker
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
    # Two clean windows per process, numbered in order; a window disturbed by a neighbour
    # (a busy machine) is kept beside the one measured in its place.
    clean = [w["process"] for w in windows if not w["discarded"]]
    assert clean == [0, 0, 1, 1]
    for process in (0, 1):
        mine = [w["window"] for w in windows if w["process"] == process]
        assert mine == list(range(len(mine)))
    assert document["n_processes"] == 2 and document["n_windows"] == 4
    assert len(steps) == len(windows) * 3
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
    mean = document["throughput_img_s"]
    assert 0 < low < mean < high
    # The interval is on the log scale: its wider side is the half-width judged.
    assert document["ci_half_width_rel"] == pytest.approx(max(high - mean, mean - low) / mean)
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
    timing = TimingSettings(min_seconds=0, max_seconds=4.0, min_windows=2, disturbed_windows="keep")
    request = tiny_request(warmup_steps=3, timed_steps=4, timing=timing)
    started = time.time()
    document, windows, steps = perform_run(request, slow_model(0.5), tiny_data())
    took = time.time() - started
    assert document["status"] == document["stop_reason"] == "over_budget"
    assert document["over_budget_phase"] == "steady"
    assert 0.5 <= document["single_step_time_s"] < 1.5  # the sleep, plus a tiny step
    assert document["single_step_time_is_lower_bound"] is False
    # 3 warm-up steps + 2 windows x 4 steps = 11. The verdict comes after the second step
    # (the first steady one) or the third, depending on how busy the machine is.
    numbers = document["stop_numbers"]
    assert numbers["steps_left"] in (8, 9) and numbers["budget_s"] == 4.0
    assert numbers["needed_s"] == pytest.approx(numbers["steps_left"] * numbers["step_s"])
    assert document["error"] is None  # a record, no sentence
    assert document["throughput_img_s"] is None and windows == [] and steps == []
    assert document["environment"]["cpu_model"]  # sent before the first step
    assert took < 4.0 + driver.STARTUP_TIMEOUT_S  # it did not wait for the budget's end
    assert (
        document["processes"][0]["ended_at_unix"] - document["processes"][0]["first_step_at_unix"]
        < 3.0 * 1.5
    )  # at most three steps, then the verdict


def test_a_slow_first_step_is_a_one_time_cost_not_the_step_time():
    # A 3 s first step (autotuning, say) ahead of millisecond steps, with a 10 s budget that
    # would allow 1 s a step: the first step has a bound of its own and does not spend the
    # budget; the steps are timed.
    timing = TimingSettings(
        min_seconds=0,
        max_seconds=10.0,
        min_windows=2,
        max_first_step_seconds=20,
        disturbed_windows="keep",
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
    timing = TimingSettings(min_seconds=0, max_seconds=1.0, disturbed_windows="keep")
    request = tiny_request(warmup_steps=2, timed_steps=2, timing=timing)
    started = time.time()
    document, _, _ = perform_run(request, slow_model(30.0), tiny_data())
    took = time.time() - started
    assert document["status"] == "over_budget"
    assert document["over_budget_phase"] == "first_step"
    assert document["single_step_time_s"] is None  # a one-time cost is not a step time
    assert document["stop_numbers"]["bound_s"] == 1.0
    assert document["stop_numbers"]["one_time_s"] >= 1.0
    assert took < 1.0 + driver.GRACE_S + 5  # not 30 s


def test_a_steady_step_longer_than_the_budget_is_killed_and_reported_as_a_lower_bound():
    timing = TimingSettings(min_seconds=0, max_seconds=1.0, disturbed_windows="keep")
    request = tiny_request(warmup_steps=2, timed_steps=2, timing=timing)
    started = time.time()
    model = functools.partial(_slow_tiny_model, 30.0, kind=SlowAfterFirstLayer)
    document, _, _ = perform_run(request, model, tiny_data())
    took = time.time() - started
    assert document["status"] == "over_budget" and document["over_budget_phase"] == "steady"
    assert document["single_step_time_is_lower_bound"] is True
    assert document["stop_numbers"]["step_lower_bound"] is True
    assert took < 1.0 + driver.GRACE_S + driver.GRACE_SHARE * 1.0 + 5  # not 30 s


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
    assert "host_overloaded" in document["unstable_reasons"]
    assert document["unstable_numbers"]["host_overloaded_windows"] >= 1
    flagged = [w for w in windows if w["flagged"]]
    assert flagged and all(w["other_cores"] > 0.25 for w in flagged)
    assert all(w["cores"] == os.cpu_count() for w in windows)


def test_process_start_time_is_before_now():
    started = worker.process_started_at_unix()
    assert started is not None and started <= time.time()
    assert time.time() - started < 24 * 3600


# --- worker output: into the job's log, and into its error when it dies ---------------------


def _chatty_model():
    """A model factory that prints and warns, as libraries do, on both descriptors."""
    import warnings

    print("hello from the worker's stdout")
    warnings.warn("a library's warning", UserWarning)
    os.write(2, b"a native library writes to fd 2\n")
    return tiny_model()


def _native_crash_model():
    """A native library's last words on fd 2, then a segfault (no Python exception)."""
    import ctypes

    os.write(2, b"libfake: Out of memory allocating 231928235328 bytes\n")
    ctypes.string_at(0)


def test_a_forked_workers_prints_and_warnings_reach_the_jobs_log(tmp_path):
    log = tmp_path / "timed_run.log"
    with logged_job(log, "timed_run"):
        document = perform_run(tiny_request("fp32"), _chatty_model, tiny_data())[0]
    assert document["status"] == "ok"
    text = log.read_text()
    for process in (0, 1):
        assert f"worker {process}: hello from the worker's stdout" in text
        assert f"worker {process}: a native library writes to fd 2" in text
    assert re.search(r"worker 0: .*UserWarning: a library's warning", text)


def test_a_native_crash_is_reported_with_the_workers_last_words(tmp_path):
    log = tmp_path / "timed_run.log"
    with pytest.raises(SystemExit):
        with logged_job(log, "timed_run"):
            perform_run(tiny_request("fp32"), _native_crash_model, tiny_data())
    text = log.read_text()
    cause = next(line for line in text.splitlines() if line.startswith("nnperf timed_run:"))
    # The one line a terminal shows names the signal and the library's last words.
    assert "worker process 0 ended without a result: killed by SIGSEGV" in cause
    assert "its last words: " in cause
    assert "worker 0: libfake: Out of memory allocating 231928235328 bytes" in text
    assert "worker 0: Fatal Python error: Segmentation fault" in text  # faulthandler


# --- workers forked by the warm server ------------------------------------------------------


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> str:
    """A prepared synthetic set: a served worker loads its data by name, as a job's does."""
    from nnperf.core.contract import DatasetRequest, DatasetSettings, SyntheticData
    from nnperf.workload import datasets

    root = tmp_path_factory.mktemp("data") / "synthetic"
    synthetic = SyntheticData(train_images=32, test_images=8)
    datasets.prepare(DatasetRequest(root=str(root), dataset=DatasetSettings(synthetic=synthetic)))
    return str(root)


def served_request(data_root: str, **changes):
    """A request a served worker can run: a registered model, the prepared data."""
    request = tiny_request("fp32", batch_size=4, **changes)
    return dataclasses.replace(request, model="resnet18_cifar", data_root=data_root)


def server_pid() -> int:
    connection = warmserver.open_connection(warmserver.address(warmserver.identity()))
    assert connection is not None, "no warm server is listening"
    connection.close()
    return connection.peer_pid


def test_one_warm_server_forks_the_workers_of_successive_jobs(data_root):
    request = served_request(data_root)
    first = perform_run(request, method=worker.WARM)[0]
    server = server_pid()
    second = perform_run(request, method=worker.WARM)[0]
    for document in (first, second):
        assert document["status"] == "ok" and document["start_method"] == "warm_server"
        # Two processes, or one when a busy machine spends the budget first.
        assert document["n_processes"] == 2 or document["stop_reason"] == "budget"
    pids = [p["pid"] for d in (first, second) for p in d["processes"]]
    assert len(set(pids)) == len(pids) >= 2 and os.getpid() not in pids and server not in pids
    assert server_pid() == server  # the second job was served by the first one's server


def test_a_served_workers_native_crash_reaches_the_jobs_error_and_log(data_root, tmp_path):
    # An absurd thread count: GNU OpenMP cannot allocate its team and exits the worker.
    request = served_request(data_root, settings={"cpu_threads": 2**30})
    log = tmp_path / "timed_run.log"
    with pytest.raises(SystemExit):
        with logged_job(log, "timed_run"):
            perform_run(request, method=worker.WARM)
    text = log.read_text()
    cause = next(line for line in text.splitlines() if line.startswith("nnperf timed_run:"))
    # The exit status the server recorded when it reaped its worker, then its last words;
    # a worker lost twice fails the run (nnperf.engine.losses).
    assert re.search(
        r"worker process 0 ended without a result: exit code \d+; its last words: libgomp: ",
        cause,
    )
    assert "lost twice, the process it replaced: ended with exit code" in cause
    assert "worker 0: libgomp: Out of memory" in text


def test_a_served_worker_killed_by_sigkill_is_named_and_replaced(data_root, tmp_path):
    """The OOM killer's SIGKILL of a served worker (the server's child, not the job's): the
    server records how it ended, the job names the signal and starts a new process."""
    start = processes.worker_starter(worker.WARM)
    killed: list[int] = []

    def start_worker(job):
        served = start(job)
        receive = served.receive

        def receive_then_kill(deadline_unix):
            message = receive(deadline_unix)  # its PID is known from here on
            if job.process == 0 and not killed:
                killed.append(served.pid)
                os.kill(served.pid, signal.SIGKILL)
            return message

        served.receive = receive_then_kill
        return served

    log = tmp_path / "timed_run.log"
    with logged_job(log, "timed_run"):
        document = perform_run(
            served_request(data_root), method=worker.WARM, start_worker=start_worker
        )[0]
    assert document["status"] == "ok" and len(killed) == 1
    (loss,) = document["worker_losses"]
    assert (loss["process"], loss["signal"], loss["exit_code"]) == (0, "SIGKILL", -9)
    assert loss["pid"] == killed[0] not in [p["pid"] for p in document["processes"]]
    assert "worker 0 of fp32 baseline killed by SIGKILL — the kernel's OOM killer?" in (
        log.read_text()
    )


def test_a_stale_socket_is_replaced_by_a_new_server(monkeypatch, data_root):
    monkeypatch.setenv("NNPERF_TEST_FRESH_SERVER", str(time.time()))  # a fresh identity
    path = warmserver.address(warmserver.identity())
    path.write_text("")  # what a killed server leaves behind
    document = perform_run(served_request(data_root), method=worker.WARM)[0]
    assert document["status"] == "ok" and document["start_method"] == "warm_server"
    os.kill(server_pid(), signal.SIGTERM)  # its identity is this test's alone


def test_a_measurement_with_its_own_model_factory_is_not_served():
    with pytest.raises(NnperfError, match="loads its model and data by name"):
        perform_run(tiny_request("fp32"), tiny_model, tiny_data(), method=worker.WARM)


def test_the_warm_server_can_be_switched_off(monkeypatch):
    monkeypatch.setenv(warmserver.ENABLE_VARIABLE, "0")
    assert not warmserver.enabled()


def test_a_served_workers_own_cpu_time_is_not_taken_for_a_competing_load():
    """A served worker is not this process's child, so the parent names its PID
    (`extra_pids`): its CPU time must count as the run's own, not as other processes'.
    Asserted as accounting, exact on a busy machine too: the worker is stopped (SIGSTOP)
    while each instant is read, so both samplers see the same worker CPU time, and the
    machine-wide counters (which other work moves between two reads) are shared by both."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    with_worker = stability.HostSampler(own_threads=0, extra_pids=[spinner.pid])
    without = stability.HostSampler(own_threads=0)
    ticks = os.sysconf("SC_CLK_TCK")

    def instant() -> tuple:
        spinner.send_signal(signal.SIGSTOP)
        try:
            with open(f"/proc/{spinner.pid}/stat", encoding="ascii") as handle:
                spun_s = stability.process_cpu_seconds(handle.read(), ticks)
            return with_worker.snapshot(), without.snapshot(), spun_s, time.monotonic()
        finally:
            spinner.send_signal(signal.SIGCONT)

    try:
        time.sleep(0.2)  # started
        before = instant()
        deadline = time.monotonic() + 30
        # On a busy machine the spinner may wait for a core: until it has spun for 0.2 s.
        while instant()[2] - before[2] < 0.2 and time.monotonic() < deadline:
            time.sleep(0.2)
        after = instant()
    finally:
        spinner.kill()
        spinner.wait()
    spun = after[2] - before[2]
    assert spun >= 0.2, "the spinner got no CPU at all"
    window_s = after[3] - before[3]

    def shared_machine(snapshot: stability.HostSnapshot, like: stability.HostSnapshot):
        return dataclasses.replace(
            snapshot, busy_s=like.busy_s, steal_s=like.steal_s, total_s=like.total_s
        )

    counted = with_worker.window_fields(
        shared_machine(before[0], before[1]), shared_machine(after[0], after[1]), window_s
    )["other_cores"]
    uncounted = without.window_fields(before[1], after[1], window_s)["other_cores"]
    # Its time is the run's own, taken off the other processes' load; what is left is this
    # test's own CPU between two reads of one instant (a clock tick at most, each side).
    assert (uncounted - counted) * window_s == pytest.approx(spun, abs=2.5 / ticks)
