"""Disturbed windows are measured again, not averaged in (issue 31): the real engine on replayed
workers and a fake clock, whose windows say they ran beside another process's load (the host
fields `nnperf.engine.stability` samples around a real window)."""

import dataclasses

import pytest

from nnperf.core import ratios
from nnperf.core.contract import RunRequest, TimingSettings, TrainingSettings
from nnperf.core.vocab import DISCARD_CAUSES, RUN_STATUSES
from nnperf.engine import interleave, rehearsal, runner, stability, stopping
from nnperf.report import aggregate

TRAINING = TrainingSettings(warmup_steps=3, timed_steps=4)
TIMING = TimingSettings(
    target_ci=0.02, min_seconds=2, max_seconds=30, min_processes=2, max_processes=4
)
BASE = RunRequest(
    device="cpu", model="m", precision="fp32", batch_size=32, training=TRAINING, timing=TIMING
)
STEP_S = 0.05
# What a neighbour holding a core does to a window on a 2-core machine.
SLOWDOWN = 3.0


class BusyHostWorker(rehearsal.ReplayWorker):
    """A replayed worker whose windows in `busy` ((process, window) pairs, or every window
    from process `busy_from` on) ran beside another process using 1.5 of the 2 cores, and
    ran `SLOWDOWN` times slower; the other windows ran on a quiet host."""

    busy: set = set()
    busy_from: int | None = None

    def _disturbed(self) -> bool:
        if self.busy_from is not None and self.index >= self.busy_from:
            return True
        return (self.index, self.window) in self.busy

    def _window_event(self):
        disturbed = self._disturbed()
        steady = self.process
        if disturbed:
            self.process = dataclasses.replace(
                steady, steady_step_s=steady.steady_step_s * SLOWDOWN
            )
        try:
            seconds, (kind, row, steps) = super()._window_event()
        finally:
            self.process = steady
        row.update(
            other_cores=1.5 if disturbed else 0.02,
            own_threads=2,
            cores=2,
            steal_share=0.0,
            load_1m=None,
            runnable_threads=None,
        )
        return seconds, (kind, row, steps)


def _timing(*steps: float) -> rehearsal.ConfigTiming:
    processes = tuple(rehearsal.ProcessTiming(s, 0.005, (3 * s, s, s)) for s in steps)
    return rehearsal.ConfigTiming(processes=processes, source="test")


def _run(request, worker_class, timing=None):
    clock = rehearsal.FakeClock()
    rng = rehearsal.np.random.default_rng(0)
    timing = timing or _timing(STEP_S, STEP_S * 1.01, STEP_S * 0.99)

    def start_worker(job):
        return worker_class(job, timing, clock, rng)

    document, _, _ = runner.perform_run(
        request, method="replay", clock=clock, start_worker=start_worker, watch_host=False
    )
    return document


def _worker(busy=(), busy_from=None):
    return type("Busy", (BusyHostWorker,), {"busy": set(busy), "busy_from": busy_from})


def test_disturbed_windows_are_replaced_and_left_out_of_the_estimate():
    busy = {(0, 0), (0, 1), (1, 0)}
    document = _run(BASE, _worker(busy))
    assert document["status"] == "ok"
    # Every window stays in the table, flagged; the disturbed ones are marked discarded.
    table = document["windows"]
    discarded = [(w["process"], w["window"]) for w in table if w["discarded"]]
    assert set(discarded) == busy
    assert all(w["flag_reasons"] == "host_overloaded" for w in table if w["discarded"])
    assert all(w["discard_reasons"] == "host_overloaded" for w in table if w["discarded"])
    assert not any(w["flagged"] for w in table if not w["discarded"])
    # Counts by cause, every cause named.
    assert document["discarded_windows"] == 3
    assert document["discarded_causes"] == {
        **dict.fromkeys(DISCARD_CAUSES, 0),
        "host_overloaded": 3,
    }
    # Each process measured clean windows in their place: min_windows clean ones each.
    clean = [w for w in table if not w["discarded"]]
    for record in document["processes"]:
        assert record["n_windows"] >= TIMING.min_windows
    assert {r["process"]: r["n_discarded_windows"] for r in document["processes"]}[0] == 2
    assert document["n_windows"] == len(clean)
    # The estimate is the clean windows' (a third slower windows would pull it down).
    samples = [stopping.WindowSample(w["process"], w["images"], w["window_s"]) for w in clean]
    assert document["throughput_img_s"] == pytest.approx(stopping.estimate(samples).throughput)
    quiet = 32 / STEP_S
    assert document["throughput_img_s"] == pytest.approx(quiet, rel=0.03)
    everything = [stopping.WindowSample(w["process"], w["images"], w["window_s"]) for w in table]
    assert stopping.estimate(everything).throughput < 0.9 * quiet
    assert "3 disturbed window(s) measured again" in runner.describe_outcome(BASE, document)
    # summary.csv carries the counts.
    row = aggregate.summary_row(document)
    assert row["discarded_windows"] == 3 and row["discarded_host_overloaded"] == 3
    assert row["discarded_cpu_steal"] == 0
    # The spread beside the estimate is the clean windows' too.
    assert row["throughput_img_s_min"] == min(w["throughput_img_s"] for w in clean)


def test_a_quiet_run_discards_nothing():
    document = _run(BASE, _worker())
    assert document["status"] == "ok" and document["discarded_windows"] == 0
    assert not any(w["discarded"] for w in document["windows"])
    assert aggregate.summary_row(document)["discarded_windows"] == 0


def test_keep_flags_the_disturbed_windows_and_averages_them_in():
    """timing.disturbed_windows: keep, for a machine that is never quiet: the same windows
    are flagged, none is measured again, and the estimate holds them (slower)."""
    keep = dataclasses.replace(BASE, timing=dataclasses.replace(TIMING, disturbed_windows="keep"))
    busy = {(0, 0), (0, 1), (1, 0)}
    document = _run(keep, _worker(busy))
    assert document["status"] == "ok" and document["discarded_windows"] == 0
    table = document["windows"]
    assert {(w["process"], w["window"]) for w in table if w["flagged"]} == busy
    assert not any(w["discarded"] for w in table) and document["n_windows"] == len(table)
    assert document["throughput_img_s"] < 0.97 * 32 / STEP_S
    assert "host_overloaded" in document["unstable_reasons"]


def test_too_many_disturbed_windows_end_host_busy_with_their_numbers():
    # Process 0 is clean; from process 1 on every window is disturbed: the budget runs out
    # with one clean process, short of min_processes = 2.
    document = _run(BASE, _worker(busy_from=1))
    assert "host_busy" in RUN_STATUSES
    assert document["status"] == "host_busy"
    assert document["n_processes"] == 1 and document["discarded_windows"] > 0
    # The numbers are kept (from the clean windows), not plotted: the status says so.
    assert document["throughput_img_s"] == pytest.approx(32 / STEP_S, rel=0.03)
    assert document["stop_reason"] == "budget"
    assert "host busy" in runner.describe_outcome(BASE, document)
    # Its clean steps still plan an operator profile or a training run.
    assert runner.expected_step_time(document) == pytest.approx(STEP_S, rel=0.05)
    row = aggregate.summary_row(document)
    assert row["status"] == "host_busy" and row["discarded_host_overloaded"] > 0
    # Every window disturbed: no number at all, and the line still prints.
    document = _run(BASE, _worker(busy_from=0))
    assert document["status"] == "host_busy" and document["throughput_img_s"] is None
    assert document["n_windows"] == 0 and len(document["windows"]) > 0
    assert "0 clean windows" in runner.describe_outcome(BASE, document)


def test_a_comparisons_rounds_leave_out_disturbed_windows():
    # The tuned member's process in round 1 runs its first two windows beside a neighbour:
    # the paired ratio is the clean windows', near the true speedup, and the comparison is
    # measured.
    tuned = dataclasses.replace(BASE, variant="tuned")
    timings = {"baseline": _timing(STEP_S), "tuned": _timing(STEP_S / 1.2)}
    clock = rehearsal.FakeClock()
    rng = rehearsal.np.random.default_rng(1)
    busy = _worker({(1, 0), (1, 1)})
    quiet = _worker()

    def start_worker(job):
        worker_class = busy if job.request.variant == "tuned" else quiet
        return worker_class(job, timings[job.request.variant], clock, rng)

    group = interleave.run_group(
        [BASE, tuned], method="replay", clock=clock, start_worker=start_worker, watch_host=False
    )
    base_result, tuned_result = group.measurements
    assert sum(bool(w["discarded"]) for w in tuned_result.windows) == 2
    rates = interleave.round_rates(tuned_result)
    round_1 = [w for w in tuned_result.windows if w["process"] == 1]
    clean = [w for w in round_1 if not w["discarded"]]
    assert rates[1] == pytest.approx(
        sum(w["images"] for w in clean) / sum(w["window_s"] for w in clean)
    )
    (row,) = group.comparisons
    assert row["measured"] is True
    assert row["ratio"] == pytest.approx(1.2, rel=0.02)
    # With the disturbed windows averaged in, round 1's ratio would be far off.
    with_all = sum(w["images"] for w in round_1) / sum(w["window_s"] for w in round_1)
    assert with_all < 0.8 * rates[1]
    shared = ratios.paired_ratio(
        [rates[r] for r in sorted(rates)],
        [interleave.round_rates(base_result)[r] for r in sorted(rates)],
    )
    assert row["ratio"] == pytest.approx(shared.ratio)


def test_a_round_whose_member_has_no_clean_window_is_not_paired():
    # A process whose windows were all discarded has no rate: its round pairs with nothing.
    result = interleave.Measurement(
        windows=[
            {"process": 0, "window": 0, "images": 10, "window_s": 1.0, "discarded": False},
            {"process": 1, "window": 0, "images": 10, "window_s": 3.0, "discarded": True},
        ],
        processes=[{"process": 0, "round": 0}, {"process": 1, "round": 1}],
    )
    assert interleave.round_rates(result) == {0: 10.0}


def test_discard_reasons_judge_the_clock_against_the_windows_so_far():
    earlier = [{"sm_clock_mhz": 1980.0}, {"sm_clock_mhz": 1980.0}]
    assert stability.discard_reasons({"sm_clock_mhz": 1500.0}, earlier) == ["sm_clock_drop"]
    assert stability.discard_reasons({"sm_clock_mhz": 1970.0}, earlier) == []
    assert stability.discard_reasons({"steal_share": 0.2}, []) == ["cpu_steal"]
    # A run that asks for more threads than cores is flagged for it, but only a neighbour's
    # load beyond the cores it left free discards a window.
    own = {"own_threads": 4, "cores": 2}
    assert stability.window_flag_reasons({**own, "other_cores": 0.0}, None) == ["host_overloaded"]
    assert stability.discard_reasons({**own, "other_cores": 0.1}, []) == []
    assert stability.discard_reasons({**own, "other_cores": 0.5}, []) == ["host_overloaded"]
    one = {"own_threads": 1, "cores": 2}
    # Over a 50 ms window the tick counters cannot tell 0.4 cores from none; over 2 s they can.
    short, long = {**own, "window_s": 0.05}, {**own, "window_s": 2.0}
    assert not stability.neighbour_load({**short, "other_cores": 0.6}, ticks_per_s=100)
    assert stability.neighbour_load({**short, "other_cores": 1.2}, ticks_per_s=100)
    assert stability.neighbour_load({**long, "other_cores": 0.4}, ticks_per_s=100)
    assert stability.discard_reasons({**one, "other_cores": 1.1}, []) == []
    assert stability.discard_reasons({**one, "other_cores": 1.5}, []) == ["host_overloaded"]
    counts = stability.discard_counts(
        [
            {"discarded": True, "discard_reasons": "host_overloaded|cpu_steal"},
            {"discarded": False, "discard_reasons": ""},
        ]
    )
    assert counts == {**dict.fromkeys(DISCARD_CAUSES, 0), "host_overloaded": 1, "cpu_steal": 1}
