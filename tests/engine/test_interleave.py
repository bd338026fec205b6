"""Interleaved measurement of compared configurations (nnperf.engine.interleave), through the
real engine on replayed workers and a fake clock: balanced order, budgets per configuration,
the comparison's own stopping rule, and why it exists (drift)."""

import dataclasses

import numpy as np
import pytest

from nnperf.core import ratios
from nnperf.core.contract import RunRequest, TimingSettings, TrainingSettings
from nnperf.engine import driver, interleave, manager, rehearsal, runner, sharing, stopping

TRAINING = TrainingSettings(warmup_steps=3, timed_steps=4)
# Disturbed windows kept: a test runner is never quiet (tests/configs/tiny.yaml says why).
TIMING = TimingSettings(
    target_ci=0.03, min_seconds=2, max_seconds=30, max_processes=8, disturbed_windows="keep"
)
BASE = RunRequest(
    device="cpu", model="m", precision="fp32", batch_size=32, training=TRAINING, timing=TIMING
)
TUNED = dataclasses.replace(BASE, variant="tuned")
TRUE_SPEEDUP = 1.05


class DriftingWorker(rehearsal.ReplayWorker):
    """A replayed worker on a machine that slows down: step times grow 0.5% per second."""

    slope = 0.005

    def _window_event(self):
        factor = 1 + self.slope * (self.clock() - rehearsal.CLOCK_START_UNIX)
        steady = self.process
        self.process = dataclasses.replace(steady, steady_step_s=steady.steady_step_s * factor)
        try:
            return super()._window_event()
        finally:
            self.process = steady


def _timing(*steps: float, cv: float = 0.01) -> rehearsal.ConfigTiming:
    processes = tuple(rehearsal.ProcessTiming(s, cv, (3 * s, s, s)) for s in steps)
    return rehearsal.ConfigTiming(processes=processes, source="test")


def _engine(timings, worker=rehearsal.ReplayWorker, seed=1):
    clock, rng = rehearsal.FakeClock(), np.random.default_rng(seed)

    def start_worker(job):
        return worker(job, timings[job.request.variant], clock, rng)

    return {"method": "replay", "clock": clock, "start_worker": start_worker, "watch_host": False}


DRIFT_TIMINGS = {"baseline": _timing(0.1), "tuned": _timing(0.1 / TRUE_SPEEDUP)}


def test_under_drift_the_interleaved_ratio_is_right_where_sequential_runs_get_it_wrong():
    group = interleave.run_group([TUNED, BASE], **_engine(DRIFT_TIMINGS, DriftingWorker))
    (row,) = group.comparisons
    assert row["kind"] == interleave.VARIANT and row["measured"]
    assert row["ratio_ci_low"] <= TRUE_SPEEDUP <= row["ratio_ci_high"]
    assert row["ratio_separated"] and row["verdict"] == "faster"
    # Numbers and codes, no sentence.
    assert not any(isinstance(v, str) and " " in v for v in row.values())

    engine = _engine(DRIFT_TIMINGS, DriftingWorker)
    apart = [manager.run_measurement(request, **engine) for request in (TUNED, BASE)]
    rates = [list(stopping.process_throughputs(m.samples()).values()) for m in apart]
    sequential = ratios.unpaired_ratio(*rates)
    assert not sequential.low <= TRUE_SPEEDUP <= sequential.high


def test_processes_alternate_in_balanced_order_and_pair_by_round():
    group = interleave.run_group([TUNED, BASE], **_engine(DRIFT_TIMINGS))
    starts = []
    for member, measurement in zip("AB", group.measurements):
        for record in measurement.processes:
            starts.append((record["started_at_unix"], member, record["round"]))
    order = [member for _, member, _ in sorted(starts)]
    assert order[:4] == ["A", "B", "B", "A"]
    for measurement in group.measurements:
        assert [r["round"] for r in measurement.processes] == list(
            range(len(measurement.processes))
        )


def test_each_configuration_spends_only_its_own_budget():
    timing = dataclasses.replace(TIMING, target_ci=0.001, max_seconds=10, max_processes=20)
    requests = [dataclasses.replace(r, timing=timing) for r in (TUNED, BASE)]
    group = interleave.run_group(requests, **_engine(DRIFT_TIMINGS))
    for measurement in group.measurements:
        assert measurement.paused_s > 0
        own = measurement.ended_at_unix - measurement.budget_start_unix - measurement.paused_s
        assert own <= timing.max_seconds + driver.GRACE_S + driver.GRACE_SHARE * 10
        assert own > timing.max_seconds / 2  # the budget was used, not cut short by the other's


def test_an_unresolved_comparison_keeps_both_configurations_measuring():
    rng = np.random.default_rng(5)
    timings = {
        "tuned": _timing(*(0.1 * (1 + rng.normal(0, 0.015, 12))), cv=0.002),
        "baseline": _timing(*(0.1 * (1 + rng.normal(0, 0.015, 12))), cv=0.002),
    }
    timing = dataclasses.replace(
        TIMING, min_seconds=1, max_seconds=60, max_processes=12, min_windows=2, max_windows=2
    )
    requests = [dataclasses.replace(r, timing=timing) for r in (TUNED, BASE)]
    group = interleave.run_group(requests, **_engine(timings))
    assert all(m.stop_reason == "ci_target" for m in group.measurements)
    assert any(m.processes_for_comparisons > 0 for m in group.measurements)
    # The one that met its target first measured on beside the other: no round unpaired.
    rounds = [set(interleave.round_rates(m)) for m in group.measurements]
    assert min(rounds, key=len) <= max(rounds, key=len)
    (row,) = group.comparisons
    assert row["resolved"] and row["verdict"] == "tie"


def test_a_group_compares_variants_within_a_precision_and_precisions_within_a_variant():
    bf16 = [dataclasses.replace(r, precision="bf16") for r in (BASE, TUNED)]
    found = interleave.comparisons([BASE, TUNED, *bf16])
    assert sorted((f.a, f.b, f.kind) for f in found) == [
        (1, 0, "variant"),
        (2, 0, "precision"),
        (3, 1, "precision"),
        (3, 2, "variant"),
    ]


@pytest.mark.parametrize("round_index, expected", [(0, [0, 1, 2]), (1, [2, 1, 0]), (2, [0, 1, 2])])
def test_balanced_order(round_index, expected):
    assert interleave.balanced_order([0, 1, 2], round_index) == expected


def test_a_group_is_every_batch_size_runnable_precision_and_variant_at_its_model_and_device():
    from nnperf.core.contract import StudyConfig, VariantSettings
    from nnperf.study import job_requests

    study = StudyConfig(
        precisions=("fp32", "tf32", "bf16"),
        batch_sizes=(16, 32),
        variants={"baseline": VariantSettings(), "tuned": VariantSettings(channels_last=True)},
    )
    assert job_requests.group_of(study, 32) == job_requests.group_of(study, 16) == [16, 32]
    members = job_requests.group_members(study, "cpu", "resnet18_cifar", [16, 32])
    # tf32 cannot run on a CPU: left out, as the matrix leaves it out.
    assert [(k.batch_size, k.precision, k.variant) for k in members] == [
        (batch, precision, variant)
        for batch in (16, 32)
        for precision in ("fp32", "bf16")
        for variant in ("baseline", "tuned")
    ]
    # A batch size outside the study (a path asked for by hand) is measured in a group alone.
    assert job_requests.group_of(study, 64) == [64]
    assert {k.batch_size for k in job_requests.group_members(study, "cpu", "m", [64])} == {64}


def test_a_group_compares_configurations_that_differ_in_one_key():
    def request(precision, batch_size, variant):
        return dataclasses.replace(
            TUNED, precision=precision, batch_size=batch_size, variant=variant
        )

    requests = [
        request(precision, batch, variant)
        for batch in (16, 32, 64)
        for precision in ("fp32", "bf16")
        for variant in ("baseline", "tuned")
    ]
    found = {
        (
            requests[c.a].precision,
            requests[c.a].batch_size,
            requests[c.a].variant,
            c.kind,
            requests[c.b].precision,
            requests[c.b].batch_size,
            requests[c.b].variant,
        )
        for c in interleave.comparisons(requests)
    }
    at = [(p, b, v) for b in (16, 32, 64) for p in ("fp32", "bf16") for v in ("baseline", "tuned")]
    expected = {(p, b, "tuned", "variant", p, b, "baseline") for p, b, v in at if v == "tuned"}
    expected |= {("bf16", b, v, "precision", "fp32", b, v) for p, b, v in at if p == "bf16"}
    # Each batch size against the group's smallest, at the same precision and variant.
    expected |= {(p, b, v, "batch_size", p, 16, v) for p, b, v in at if b != 16}
    assert found == expected
    # Named with their batch sizes, as their files in the group's folder are.
    names = sharing.member_names(requests)
    assert names[:2] == ["fp32_bs16_baseline", "fp32_bs16_tuned"] and len(set(names)) == 12
    assert sharing.member_names(requests[:2]) == ["fp32_baseline", "fp32_tuned"]


def test_a_member_the_group_did_not_measure_is_one_line_naming_its_file(tmp_path):
    from nnperf.core.errors import NnperfError
    from nnperf.engine import runner

    outputs = {kind: str(tmp_path / f"out{kind}") for kind in ("run", "run_windows", "run_steps")}
    with pytest.raises(NnperfError, match=r"fp32_tuned\.json is missing: the group .* did not"):
        runner.copy_member(tmp_path, TUNED, outputs)


# Two configurations of one speed whose processes differ by ~12% each, independently: the
# paired ratio is centred on 1 and wide, the absolute 3% target needs ~60 processes, and a
# 40 s budget fits about 15 (the 2-vCPU default study's bf16 at batch 16, scaled down).
NOISY_TIMING = dataclasses.replace(
    TIMING, min_seconds=1, max_seconds=40, max_processes=40, min_windows=2, max_windows=2
)


def _noisy(seed: int, speedup: float = 1.0, spread: float = 0.12):
    rng = np.random.default_rng(seed)
    return {
        "tuned": _timing(*(0.1 / speedup * (1 + rng.normal(0, spread, 40))), cv=0.002),
        "baseline": _timing(*(0.1 * (1 + rng.normal(0, spread, 40))), cv=0.002),
    }


def _spent(measurement) -> float:
    return measurement.ended_at_unix - measurement.budget_start_unix - measurement.paused_s


def test_a_comparison_out_of_reach_stops_holding_its_members(monkeypatch):
    requests = [dataclasses.replace(r, timing=NOISY_TIMING) for r in (TUNED, BASE)]
    group = interleave.run_group(requests, **_engine(_noisy(3)))
    (row,) = group.comparisons
    assert row["verdict"] == ratios.OUT_OF_REACH and not row["resolved"]
    assert row["ratio_ci_low"] < 1 < row["ratio_ci_high"]
    assert row["rounds_needed"] > row["rounds_fit"] > row["ratio_n"]
    assert not any(isinstance(v, str) and " " in v for v in row.values())
    # Each member's run JSON names the other (the report's comparisons.csv says it by that),
    # and the job's log line words it.
    name = runner.group_name(requests)
    assert interleave.out_of_reach_with(group.comparisons, TUNED, name) == ["fp32_baseline"]
    assert interleave.out_of_reach_with(group.comparisons, BASE, name) == ["fp32_tuned"]
    line = runner.comparison_line(row)
    assert line.startswith("fp32 bs32 tuned vs fp32 bs32 baseline: not separated")
    assert (
        f"out of reach after {row['ratio_n']} rounds: the rounds both budgets still fit could "
        f"not resolve it (~{row['rounds_needed']} needed, {row['rounds_fit']} fit)"
    ) in line
    for measurement in group.measurements:
        assert measurement.stop_reason == "target_unreachable"
        assert _spent(measurement) < NOISY_TIMING.max_seconds * 0.75

    # The same group with the comparison held open to the end, as before: the budgets go.
    monkeypatch.setattr(stopping, "comparison_out_of_reach", lambda *args: None)
    held = interleave.run_group(requests, **_engine(_noisy(3)))
    assert held.comparisons[0]["verdict"] == "unresolved"
    assert held.rounds > group.rounds
    for measurement in held.measurements:
        assert _spent(measurement) > NOISY_TIMING.max_seconds * 0.8


def test_a_comparison_that_can_resolve_is_held_until_it_does():
    # The same noise, and a 12% speedup: a dozen rounds separate it, and the budgets fit them.
    requests = [dataclasses.replace(r, timing=NOISY_TIMING) for r in (TUNED, BASE)]
    group = interleave.run_group(requests, **_engine(_noisy(3, speedup=1.12, spread=0.04)))
    (row,) = group.comparisons
    assert row["verdict"] == "faster" and row["rounds_needed"] is None
    assert any(m.processes_for_comparisons > 0 for m in group.measurements)
