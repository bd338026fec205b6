"""The GPU study rehearsed: recorded H100 timings replayed through the real engine.

Every configuration of `config/gpu.yaml` is measured by the real runner, stopping rule and
budget code (`nnperf.engine.runner.perform_run`), with workers that replay what nnperf's own
processes took on an H100 80GB (`nnperf/engine/recordings/h100.json`, from shared/h100/runs) on a
fake clock. What went wrong there before (a tuned configuration killed in its cuDNN
autotuning, a 5.7 s warm-up step passed on as the step time) must not happen here.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from conftest import REPO
from nnperf.core.contract import RunRequest, TimingSettings, TrainingSettings, VariantSettings
from nnperf.engine import manager, rehearsal, stopping
from nnperf.engine.runner import expected_step_time
from nnperf.study import loading as study

GPU_STUDY = REPO / "config" / "gpu.yaml"
SHARED_RUNS = REPO.parent / "shared" / "h100" / "runs"


@pytest.fixture(scope="module")
def gpu_replays():
    """Every configuration of config/gpu.yaml, replayed on the recorded H100."""
    model = rehearsal.h100_model()
    requests = study.load_study([GPU_STUDY], detect=lambda: "cuda").run_requests()
    replays = {}
    for request in requests:
        timing = model.timing_for(request)
        assert timing is not None, f"no H100 timings for {request.precision} {request.variant}"
        replays[(request.precision, request.batch_size, request.variant)] = (
            request,
            timing,
            rehearsal.replay(request, timing),
        )
    return replays


def test_replay_covers_every_gpu_study_configuration(gpu_replays):
    gpu = study.load_study([GPU_STUDY], detect=lambda: "cuda").config
    expected = (
        len(gpu["models"]) * len(gpu["precisions"]) * len(gpu["batch_sizes"]) * len(gpu["variants"])
    )
    assert len(gpu_replays) == expected >= 24
    assert {variant for _, _, variant in gpu_replays} == {"baseline", "tuned", "compiled"}


def test_replay_no_tuned_or_compiled_gpu_configuration_ends_over_budget(gpu_replays):
    for (precision, batch, variant), (_, timing, replay) in gpu_replays.items():
        document = replay.document
        if variant == "baseline":
            continue
        assert document["status"] == "ok", (precision, batch, variant, document["error"])
        # The steady step is what the document calls the step time, never the first step.
        assert document["single_step_time_s"] == pytest.approx(document["step_time_s"]["median"])
        assert document["first_step_time_s"] > 20 * document["step_time_s"]["median"]


def test_replay_tuned_first_steps_are_autotuning_reported_as_one_time_costs(gpu_replays):
    _, timing, replay = gpu_replays[("fp32", 256, "tuned")]
    document = replay.document
    # fp32 tuned: a 5.7 s first step (cuDNN autotuning) ahead of 31 ms steps.
    assert document["one_time_step_time_s"] == {"first_step": pytest.approx(5.715, abs=0.01)}
    assert document["one_time_s"] == pytest.approx(5.715, abs=0.01)
    assert document["step_time_s"]["median"] == pytest.approx(0.0306, rel=0.05)
    assert expected_step_time(document) == pytest.approx(0.0306, rel=0.05)


def test_replay_cuda_graph_variant_gets_at_least_two_processes(gpu_replays):
    for (precision, batch, variant), (_, _, replay) in gpu_replays.items():
        if variant != "compiled":
            continue
        document = replay.document
        assert document["n_processes"] >= 2, (precision, batch, document["stop_reason"])
        assert document["ci_method"] == "processes"
        assert set(document["one_time_step_time_s"]) == {"compile", "recording"}


def test_replay_recording_step_is_not_projected_as_a_steady_step(gpu_replays):
    # bf16 batch 1024 under CUDA graphs, recorded: a 21 s compile, a 0.51 s recording step,
    # then 12-15 ms steps.
    _, timing, replay = gpu_replays[("bf16", 1024, "compiled")]
    document = replay.document
    assert timing.source.startswith("H100 recorded: runs/sweep/cudagraphs_bf16_bs1024.json")
    assert document["recording_time_s"] == pytest.approx(0.5113, rel=0.01)
    assert document["one_time_step_time_s"]["compile"] == pytest.approx(20.968, rel=0.01)
    assert expected_step_time(document) < 0.02
    assert document["compile_time_s"] > 20


def test_engine_plans_a_later_compiled_process_at_the_cost_the_replay_gives_it(gpu_replays):
    """One share of a later compilation (`stopping.LATER_COMPILE_SHARE`), in the engine's plan
    and in the replay: what the engine expects process 1 to cost, from process 0 alone, is
    what process 1 then costs on the replayed clock (a share planned lower than the replay's
    would start processes the budget cuts off)."""
    request, recorded, _ = gpu_replays[("bf16", 1024, "compiled")]
    # One recorded process, so that process 1 replays process 0's steps, recompiling.
    timing = dataclasses.replace(recorded, processes=recorded.processes[:1])
    replay = rehearsal.replay(request, timing)
    document = replay.document
    first, second = document["processes"][:2]
    alone = manager.Measurement(
        processes=[first], windows=[w for w in replay.windows if w["process"] == 0]
    )
    planned = stopping.process_cost(alone.processes, alone.windows, compiled=True)
    started = min(w["started_at_unix"] for w in replay.windows if w["process"] == 1)
    cost = started - second["started_at_unix"]
    compiling = first["one_time_step_time_s"]["compile"]
    assert compiling > 20 and planned < compiling  # a warm-cache compilation was planned
    # The engine counts the whole first step as compilation, the replay keeps a steady step
    # out of it: they differ by under one step.
    assert cost == pytest.approx(planned, abs=timing.processes[0].steady_step_s)
    assert second["warmup_step_time_s"][0] == pytest.approx(
        timing.processes[0].steady_step_s
        + stopping.LATER_COMPILE_SHARE * (compiling - timing.processes[0].steady_step_s)
    )


def test_replay_unreachable_target_stops_early_with_the_reason(gpu_replays):
    # bf16 tuned at batch 256: three recorded processes at 23.1k, 22.3k and 21.3k img/s
    # (cuDNN's per-process algorithm choice): 1% is dozens of processes away.
    request, timing, replay = gpu_replays[("bf16", 256, "tuned")]
    document = replay.document
    assert len(timing.processes) >= 3
    assert document["status"] == "ok" and document["stop_reason"] == "target_unreachable"
    numbers = document["stop_numbers"]
    assert numbers["target_ci"] == 0.01 and 0.01 < numbers["process_spread_rel"] < 0.1
    # Judged at the spread's lower bound (a floor), and more at the measured spread.
    assert numbers["processes_needed"] >= numbers["processes_needed_low"]
    assert numbers["processes_needed_low"] > request.timing.max_processes
    assert numbers["max_processes"] == request.timing.max_processes
    assert document["n_processes"] == 3  # the minimum the judgement needs, then stop
    steady_budget = document["ended_at_unix"] - document["started_at_unix"] - document["one_time_s"]
    assert steady_budget < request.timing.max_seconds  # it did not spend the budget
    assert document["ci_target_met"] is False


def _request(**settings) -> RunRequest:
    timing = settings.pop("timing", TimingSettings(target_ci=0.01, min_seconds=2, max_seconds=35))
    return RunRequest(
        device="cuda",
        model="resnet18_cifar",
        precision="bf16",
        batch_size=256,
        variant="tuned",
        settings=VariantSettings(**settings),
        training=TrainingSettings(warmup_steps=5, timed_steps=10),
        timing=timing,
    )


def _one_process(steady: float, warmup: tuple[float, ...], cv: float = 0.01):
    return rehearsal.ConfigTiming(
        processes=(rehearsal.ProcessTiming(steady, cv, warmup),), source="test"
    )


def test_replay_over_budget_in_a_one_time_step_hands_no_step_time_downstream():
    # A 50 s autotune (past the 35 s bound) ahead of 10 ms steps: over budget, and no step
    # time at all for the operator profile or training to plan from.
    timing = _one_process(0.010, (50.0, 0.012, 0.011))
    document = rehearsal.replay(_request(cudnn_benchmark=True), timing).document
    assert document["status"] == "over_budget"
    assert document["over_budget_phase"] == "first_step"
    assert document["single_step_time_s"] is None
    assert expected_step_time(document) is None
    assert document["stop_reason"] == "over_budget" and document["error"] is None
    assert document["stop_numbers"]["bound_s"] == 35 and document["stop_numbers"]["one_time_s"] > 35


def test_replay_over_budget_in_steady_steps_hands_the_steady_step_downstream():
    # 5 s first step, then 4 s steady steps: 24 more steps cannot fit in 35 s. The second
    # step overruns its share of the budget (35 s / 24 + grace) and is cut off there: the
    # step time handed on is that steady step's lower bound, never the 5 s first step.
    timing = _one_process(4.0, (5.0, 4.0, 4.0, 4.0, 4.0))
    document = rehearsal.replay(_request(cudnn_benchmark=True), timing).document
    assert document["status"] == "over_budget" and document["over_budget_phase"] == "steady"
    assert document["single_step_time_is_lower_bound"] is True
    assert expected_step_time(document) == pytest.approx(35 / 24 + 2.0, rel=0.01)
    numbers = document["stop_numbers"]
    assert numbers["step_lower_bound"] is True
    assert numbers["step_s"] == pytest.approx(35 / 24 + 2.0, rel=0.01)
    # Slower than its share but not cut off: the verdict comes with the measured step.
    timing = _one_process(1.6, (5.0, 1.6, 1.6, 1.6, 1.6))
    document = rehearsal.replay(_request(cudnn_benchmark=True), timing).document
    assert document["status"] == "over_budget" and document["over_budget_phase"] == "steady"
    assert document["single_step_time_is_lower_bound"] is False
    assert expected_step_time(document) == pytest.approx(1.6)


def test_replay_is_deterministic_for_a_seed():
    model = rehearsal.h100_model()
    request = _request(cudnn_benchmark=True, channels_last=True)
    timing = model.timing_for(request)
    first = rehearsal.replay(request, timing, seed=3).document
    again = rehearsal.replay(request, timing, seed=3).document
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)


def test_model_scales_an_unrecorded_batch_size_linearly_but_not_its_autotuning():
    model = rehearsal.h100_model()
    at_256 = model.timing_for(dataclasses.replace(_request(cudnn_benchmark=True), precision="fp32"))
    at_1024 = model.timing_for(
        dataclasses.replace(_request(cudnn_benchmark=True), precision="fp32", batch_size=1024)
    )
    assert "scaled linearly from batch 256 to 1024" in at_1024.source
    assert at_1024.steady_step_s == pytest.approx(4 * at_256.steady_step_s)
    first = [p.warmup_step_time_s[0] for p in at_1024.processes]
    assert first == [p.warmup_step_time_s[0] for p in at_256.processes]


def test_model_takes_other_precisions_of_a_compiled_variant_from_the_tuned_ratio():
    model = rehearsal.h100_model()
    request = dataclasses.replace(
        _request(compile="reduce-overhead"), precision="fp16", variant="compiled"
    )
    timing = model.timing_for(request)
    assert "bf16 scaled to fp16" in timing.source
    assert timing.compile_s > 10
    assert len(timing.processes) >= 2  # the spread of the recorded fp16 tuned processes


def test_recorded_timings_are_the_shared_h100_run_documents():
    if not SHARED_RUNS.is_dir():
        pytest.skip("shared/h100 is not beside this checkout")
    recorded = {run["file"]: run for run in rehearsal.load_recorded("h100")["runs"]}
    shared = sorted(SHARED_RUNS.glob("*/*.json"))
    assert len(recorded) == len(shared)
    for path in shared:
        document = json.loads(path.read_text())
        run = recorded[str(path.relative_to(SHARED_RUNS.parent))]
        assert run["warmup_step_time_s"] == document["warmup_step_time_s"]
        assert run["step_time_s"] == document["step_time_s"]
        assert run["variant_settings"] == document["variant_settings"]


def test_timings_from_a_run_document_use_each_of_its_processes():
    document = {
        "status": "ok",
        "throughput_img_s": 1000.0,
        "step_time_s": {"median": 0.256, "std": 0.0256},
        "variant_settings": {"compile": False},
        "processes": [
            {"process": 0, "throughput_img_s": 900.0, "warmup_step_time_s": [2.0, 0.3]},
            {"process": 1, "throughput_img_s": 1100.0, "warmup_step_time_s": [1.0, 0.25]},
        ],
    }
    timing = rehearsal.ConfigTiming.from_run_documents([document], source="earlier study")
    assert [p.warmup_step_time_s for p in timing.processes] == [(2.0, 0.3), (1.0, 0.25)]
    steady = [p.steady_step_s for p in timing.processes]
    assert steady == pytest.approx([0.256 * 1000 / 900, 0.256 * 1000 / 1100])
    assert timing.processes[0].step_cv == pytest.approx(0.1)
    assert timing.compile_s == 0.0


def test_one_time_kinds_by_compile_mode():
    assert stopping.one_time_kinds(False) == ("first_step",)
    assert stopping.one_time_kinds("default") == ("compile",)
    assert stopping.one_time_kinds("reduce-overhead") == ("compile", "recording")
    assert stopping.one_time_kinds("max-autotune") == ("compile", "recording")


def test_too_few_warm_up_steps_for_cuda_graphs_is_one_line():
    request = dataclasses.replace(
        _request(compile="reduce-overhead"),
        training=TrainingSettings(warmup_steps=1, timed_steps=10),
    )
    with pytest.raises(Exception, match=r"warmup_steps 1 is not allowed; allowed: an integer >= 2"):
        rehearsal.replay(request, _one_process(0.01, (20.0, 0.5)))


def test_model_says_nothing_of_a_model_or_device_it_has_no_recording_of():
    model = rehearsal.h100_model()
    request = _request(cudnn_benchmark=True)
    assert model.timing_for(request) is not None
    assert model.timing_for(dataclasses.replace(request, model="resnet34_cifar")) is None
    assert model.timing_for(dataclasses.replace(request, device="cpu")) is None


# --- a group: the configurations of one model x device x batch size, interleaved ----------


def _gpu_group(batch_size: int):
    model = rehearsal.h100_model()
    requests = [
        r
        for r in study.load_study([GPU_STUDY], detect=lambda: "cuda").run_requests()
        if r.batch_size == batch_size
    ]
    return requests, [model.timing_for(r) for r in requests]


def test_replay_group_interleaves_every_member_on_one_clock():
    requests, timings = _gpu_group(256)
    group = rehearsal.replay_group(requests, timings, seed=0)
    assert [(d["precision"], d["variant"]) for d in group.documents] == [
        (r.precision, r.variant) for r in requests
    ]
    # Rounds alternate the members, so each one's wall time holds the others' processes as
    # pauses, and the group lasts as long as all of its members' own time together.
    own = [d["elapsed_s"] for d in group.documents]
    assert all(d["paused_s"] > 0 for d in group.documents)
    assert group.wall_s >= sum(own)
    assert group.rounds == max(d["n_processes"] for d in group.documents)
    kinds = {row["kind"] for row in group.comparisons}
    assert kinds == {"precision", "variant"}
    again = rehearsal.replay_group(requests, timings, seed=0)
    assert again.wall_s == group.wall_s and again.rounds == group.rounds


def test_replay_group_measures_on_for_an_unresolved_comparison():
    # Two members at the same speed whose processes differ by up to 9%, in another order:
    # each stops on its own (a loose target, or the spread), but the paired ratio's interval
    # neither excludes 1 nor lies within the 5% tolerance after the first rounds, so both
    # measure on for the comparison.
    base = _request(
        timing=TimingSettings(target_ci=0.05, min_seconds=1, max_seconds=60, max_processes=12)
    )
    tuned = dataclasses.replace(base, variant="baseline", settings=VariantSettings())
    fast = dataclasses.replace(
        base, variant="tuned", settings=VariantSettings(cudnn_benchmark=True)
    )

    def spread(factors):
        return rehearsal.ConfigTiming(
            processes=tuple(
                rehearsal.ProcessTiming(0.010 * f, 0.002, (0.05, 0.01, 0.01, 0.01, 0.01))
                for f in factors
            ),
            source="test",
        )

    a, b = spread((1.0, 1.06, 0.97, 1.03)), spread((1.06, 0.97, 1.03, 1.0))
    group = rehearsal.replay_group([tuned, fast], [a, b], seed=1)
    alone = rehearsal.replay(tuned, a, seed=1).document
    documents = {d["variant"]: d for d in group.documents}
    extra = sum(d["processes_for_comparisons"] for d in documents.values())
    assert extra > 0, [row["verdict"] for row in group.comparisons]
    assert documents["baseline"]["n_processes"] > alone["n_processes"]
