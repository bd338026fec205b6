"""The operator-profile job: a real profile on the CPU, its files, and every way it can end.

One real profile of the registry's resnet18_cifar (batch 4, one warm-up and two profiled
steps, the synthetic data set prepared in a temporary folder) goes through the job's file
edge; the statuses use the tiny model of tests/tiny_training.py.
"""

from __future__ import annotations

import gzip
import json
import os
import math
import time
import types

import pandas as pd
import pytest
import torch

from nnperf.core.contract import (
    DatasetRequest,
    DatasetSettings,
    OperatorProfileRequest,
    OperatorProfileSettings,
    RunRequest,
    SyntheticData,
)
from nnperf.core.errors import NnperfError
from nnperf.core.variant import parse_variant_settings
from nnperf.engine import runner
from nnperf.torchprof import analysis as operators
from nnperf.torchprof import breakdown, events
from nnperf.torchprof import memory as step_memory
from nnperf.torchprof import profile as opprofile
from nnperf.workload import models
from nnperf.workload import datasets as data
from tiny_training import tiny_data, tiny_model, tiny_request

OUTPUTS = ("out_json", "out_trace", "out_operators", "out_layers", "out_steps", "out_memory")
# resnet18_cifar's complexity document (rule `complexity`), the fields the profile reads.
RESNET18_CIFAR_COMPLEXITY = {
    "model": "resnet18_cifar",
    "weight_bytes": 44_695_848,
    "gradient_bytes": 44_695_848,
    "optimizer_state_bytes": 44_695_848,
    "saved_activation_bytes_per_image": 4_700_160,
    "saved_activation_fixed_bytes": 38_400,
}
BATCH = 4


def output_paths(folder) -> dict:
    names = {
        "out_json": "profile.json",
        "out_trace": "profile.json.gz",
        "out_operators": "operators.csv",
        "out_layers": "layers.csv",
        "out_steps": "steps.csv",
        "out_memory": "memory.csv",
    }
    return {key: folder / name for key, name in names.items()}


def read_trace(path) -> dict:
    raw = path.read_bytes()
    assert raw[:2] == b"\x1f\x8b", "the trace is gzipped"
    return json.loads(gzip.decompress(raw))


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    """A real profile of resnet18_cifar through `operator_profile_to_files`."""
    folder = tmp_path_factory.mktemp("opprofile")
    root = folder / "data"
    synthetic = SyntheticData(train_images=32, test_images=8)
    data.prepare(DatasetRequest(root=str(root), dataset=DatasetSettings(synthetic=synthetic)))
    run = RunRequest(
        device="cpu",
        model="resnet18_cifar",
        precision="fp32",
        batch_size=BATCH,
        data_root=str(root),
    )
    timed = folder / "run.json"
    timed.write_text(
        json.dumps(
            {**run.keys(), "status": "ok", "step_time_s": {"median": 0.05}, "throughput_img_s": 80}
        )
    )
    complexity = folder / "complexity.json"
    complexity.write_text(json.dumps(RESNET18_CIFAR_COMPLEXITY))
    request = OperatorProfileRequest(
        run=run, settings=OperatorProfileSettings(warmup_steps=1, steps=2, max_seconds=60)
    )
    paths = output_paths(folder)
    document = opprofile.operator_profile_to_files(
        request, **paths, run_json=timed, complexity_json=complexity
    )
    return document, paths


def test_the_trace_is_a_gzipped_chrome_trace_with_the_steps_operators(resnet):
    document, paths = resnet
    trace = read_trace(paths["out_trace"])
    events = trace["traceEvents"]
    assert isinstance(events, list) and all("ph" in e for e in events)
    names = {e["name"] for e in events if e.get("cat") == "cpu_op"}
    assert {"aten::convolution", "aten::addmm", "aten::convolution_backward"} <= names
    steps = sorted(e["name"] for e in events if e["name"].startswith("nnperf_step#"))
    assert steps == ["nnperf_step#0", "nnperf_step#1"]
    assert any(e["name"] == "nnperf_module:layer1.0.conv1" for e in events)
    assert any(e["name"] == "[memory]" for e in events)
    # The trace carries its own keys.
    assert trace["nnperf"]["model"] == "resnet18_cifar" and trace["nnperf"]["batch_size"] == 4
    assert document["status"] == "ok" and document["profiled_steps"] == 2


def test_operator_times_add_up_to_the_profiled_steps(resnet):
    document, paths = resnet
    table = pd.read_csv(paths["out_operators"])
    steps = pd.read_csv(paths["out_steps"])
    assert list(table.columns) == list(breakdown.OPERATOR_COLUMNS)
    assert list(steps.columns) == list(operators.STEP_COLUMNS) and len(steps) == 2
    step_s = steps["step_time_s"].mean()
    assert table["host_self_time_s"].sum() == pytest.approx(step_s, rel=0.10)
    inside = table.loc[table["kind"] != "outside", "host_self_time_s"].sum()
    assert 0.5 * step_s < inside <= step_s
    assert table["device_self_time_s"].isna().all()
    convolution = table.set_index("operator").loc["aten::convolution_backward"]
    assert convolution["calls_per_step"] == 20  # 17 convs + 3 shortcut convs
    assert "4x" in convolution["input_shapes"]
    # The analysis of the file gives the job's tables back.
    again = operators.analyse(events.load_trace(paths["out_trace"]), "cpu")
    assert again.operators["host_self_time_s"].sum() == pytest.approx(
        table["host_self_time_s"].sum()
    )


def test_layers_are_the_models_module_paths(resnet):
    _, paths = resnet
    layers = pd.read_csv(paths["out_layers"], keep_default_na=False)
    modules = dict(models.build_model("resnet18_cifar", 10).named_modules())
    named = [layer for layer in layers["layer"] if not layer.startswith("(")]
    assert named and all(layer in modules for layer in named)
    table = layers.set_index("layer")
    for layer in ("conv1", "layer1.0.conv1", "layer4.1.bn2", "fc"):
        assert table.at[layer, "forward_host_time_s"] > 0, layer
        assert table.at[layer, "backward_host_time_s"] > 0, layer
    assert table.at["layer1.0.conv1", "module_type"] == "Conv2d"
    assert table.at["layer1.0", "module_type"] == "BasicBlock"  # its residual add
    assert table.at[events.LOSS_MODULE, "module_type"] == "CrossEntropyLoss"
    steps = pd.read_csv(paths["out_steps"])
    assert layers["host_time_s"].sum() == pytest.approx(steps["step_time_s"].mean(), rel=0.10)


def test_memory_split_adds_up_and_parameters_are_exact(resnet):
    document, paths = resnet
    memory = document["memory"]
    model = models.build_model("resnet18_cifar", 10)
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert memory["parameters_bytes"] == parameter_bytes == 44_695_848
    assert memory["optimizer_state_bytes"] == parameter_bytes  # one SGD momentum buffer each
    parts = sum(memory[f"{c}_bytes"] for c in step_memory.MEMORY_CATEGORIES)
    assert parts == memory["peak_allocated_bytes"]
    assert memory["activations_bytes"] > 0 and 0 < memory["gradients_bytes"] <= parameter_bytes
    assert memory["gradients_total_bytes"] == parameter_bytes
    table = pd.read_csv(paths["out_memory"]).set_index("category")
    assert table["bytes"].sum() == memory["peak_allocated_bytes"]
    assert table.at["parameters", "estimate_bytes"] == table.at["parameters", "bytes"]
    assert table.at["activations", "estimate_bytes"] == 38_400 + BATCH * 4_700_160
    assert document["saved_activation_estimate_bytes"] == 38_400 + BATCH * 4_700_160
    assert memory["max_batch_size"] > BATCH  # a CPU's memory holds far more than 4 images


def test_the_document_checks_against_the_timed_run(resnet):
    document, paths = resnet
    summary = document["summary"]
    assert summary["timed_step_time_s"] == 0.05
    assert summary["profiled_over_timed"] == pytest.approx(summary["step_time_s"] / 0.05)
    assert summary["busy_kind"] == operators.BUSY_HOST
    assert summary["bound"] in (operators.OPERATOR_BOUND, operators.MIXED, operators.OVERHEAD_BOUND)
    assert document["timed_run"]["status"] == "ok"
    saved = json.loads(paths["out_json"].read_text())
    assert saved["schema_version"] == 1 and saved["kind"] == "operator_profile"
    assert (saved["model"], saved["device"], saved["variant"]) == (
        "resnet18_cifar",
        "cpu",
        "baseline",
    )
    assert saved["profiler"]["layer_ranges"] is True
    assert set(saved["cost"]) == {"build_s", "one_time_s", "warmup_s", "profile_s", "analysis_s"}
    # One warm-up step asked for: it is the one-time step, so no steady unprofiled step.
    assert saved["one_time_steps"] == 1 and saved["unprofiled_step_time_s"] is None
    assert saved["cost"]["one_time_s"] == saved["warmup_step_time_s"][0]


# --- how a profile can end ------------------------------------------------------------------


def tiny_profile(settings=OperatorProfileSettings(warmup_steps=1, steps=2), **kwargs):
    request = OperatorProfileRequest(run=tiny_request(), settings=settings)
    return opprofile.perform_operator_profile(request, tiny_model, tiny_data(), **kwargs)


def assert_outputs_written(profile, folder) -> dict:
    """Every output exists, the trace is a valid (empty) Chrome trace, the tables have
    their columns; returns the trace."""
    paths = output_paths(folder)
    opprofile.write_outputs(profile, **paths)
    trace = read_trace(paths["out_trace"])
    assert trace["traceEvents"] == []
    for name, columns in (
        ("out_operators", breakdown.OPERATOR_COLUMNS),
        ("out_layers", breakdown.LAYER_COLUMNS),
        ("out_steps", operators.STEP_COLUMNS),
        ("out_memory", step_memory.MEMORY_COLUMNS),
    ):
        table = pd.read_csv(paths[name])
        assert list(table.columns) == list(columns) and table.empty, name
    assert json.loads(paths["out_json"].read_text())["status"] == profile.document["status"]
    return trace


CUPTI_ERROR = (
    "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: function cuptiActivityEnable failed\n"
    "see https://developer.nvidia.com/nvidia-development-tools-solutions-err-nvgpuctrperm-cupti"
)


class FailingProfiler:
    """torch.profiler.profile when CUPTI refuses: the error comes when it starts. (A CUPTI
    failure cannot be produced on a machine without a GPU; this is the one stand-in.)"""

    def __init__(self, **_settings):
        pass

    def preset_metadata_json(self, key, value):
        pass

    def __enter__(self):
        raise RuntimeError(CUPTI_ERROR)

    def __exit__(self, *exc):
        return False


def test_a_profiler_that_fails_to_start_is_unsupported_with_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.profiler, "profile", FailingProfiler)
    profile = tiny_profile()
    document = profile.document
    assert document["status"] == "unsupported"
    assert document["error"].startswith("torch.profiler failed to start: RuntimeError: CUPTI_")
    assert "\n" not in document["error"]
    assert document["warmup_steps_run"] == 1 and document["profiled_steps"] == 0
    trace = assert_outputs_written(profile, tmp_path)
    assert trace["nnperf"]["status"] == "unsupported"


def test_a_torch_build_without_kineto_is_unsupported(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.autograd, "kineto_available", lambda: False)
    profile = tiny_profile()
    assert profile.document["status"] == "unsupported"
    assert "no Kineto profiler" in profile.document["error"]
    assert_outputs_written(profile, tmp_path)


def refuse_to_build():
    raise AssertionError("an over-budget configuration must not be built")


def test_a_timed_step_too_slow_for_the_budget_is_over_budget_before_building(tmp_path):
    request = OperatorProfileRequest(
        run=tiny_request(), settings=OperatorProfileSettings(max_seconds=10)
    )
    timed = {**request.run.keys(), "status": "over_budget", "single_step_time_s": 13.2}
    profile = opprofile.perform_operator_profile(
        request, refuse_to_build, tiny_data(), timed_run=timed
    )
    document = profile.document
    assert document["status"] == "over_budget" and document["warmup_steps_run"] == 0
    assert document["single_step_time_s"] == {"seconds": 13.2, "source": "timed runs"}
    assert "operator_profile.max_seconds is 10 s" in document["error"]
    assert_outputs_written(profile, tmp_path)


def test_without_a_timed_run_the_first_steady_warm_up_step_decides():
    """The first step is a one-time step: the second, the first steady one, is the basis."""
    profile = tiny_profile(OperatorProfileSettings(max_seconds=1e-6))
    document = profile.document
    assert document["status"] == "over_budget"
    assert document["warmup_steps_run"] == 2 and document["one_time_steps"] == 1
    assert document["single_step_time_s"] == {
        "seconds": document["warmup_step_time_s"][1],
        "source": "warm-up step",
    }


def test_a_run_document_of_another_configuration_is_refused():
    request = OperatorProfileRequest(run=tiny_request())
    timed = {**request.run.keys(), "batch_size": 64, "status": "ok"}
    with pytest.raises(NnperfError, match="batch_size 64"):
        opprofile.perform_operator_profile(request, tiny_model, tiny_data(), timed_run=timed)


@pytest.mark.parametrize(
    ("step_s", "settings", "spent_s", "done", "plan"),
    [
        # 3 + 3 steps at 1 s: 3 + 3 x 1.5 = 7.5 s fit in 20.
        (1.0, OperatorProfileSettings(warmup_steps=3, steps=3, max_seconds=20), 0, 0, (3, 3)),
        # 4 s: one profiled step costs 1.5; warm-up min(3, (4 - 1.5) // 1) = 2, then no room.
        (1.0, OperatorProfileSettings(warmup_steps=3, steps=5, max_seconds=4), 0, 0, (2, 1)),
        # 1 warm-up + 1 profiled = 2.5 s > 2 s.
        (1.0, OperatorProfileSettings(warmup_steps=3, steps=3, max_seconds=2), 0, 0, None),
        # Two warm-ups done and 15 of 20 s spent: 5 s left = 1 more warm-up + 2 profiled.
        (1.0, OperatorProfileSettings(warmup_steps=3, steps=3, max_seconds=20), 15, 2, (1, 2)),
        # No warm-up asked for: only the profiled step must fit.
        (1.0, OperatorProfileSettings(warmup_steps=0, steps=1, max_seconds=1.5), 0, 0, (0, 1)),
    ],
)
def test_plan_steps_hand_computed(step_s, settings, spent_s, done, plan):
    got = opprofile.plan_steps(step_s, settings, spent_s, done)
    assert (None if got is None else (got.warmup_steps, got.profiled_steps)) == plan


def test_the_cuda_profiler_warm_up_step_is_budgeted():
    settings = OperatorProfileSettings(warmup_steps=1, steps=1, max_seconds=3)
    assert opprofile.plan_steps(1.0, settings, profiler_warmup_steps=0) is not None
    assert opprofile.plan_steps(1.0, settings, profiler_warmup_steps=1) is None  # 1 + 2 x 1.5


def test_steps_cut_to_the_budget_are_noted():
    request = OperatorProfileRequest(
        run=tiny_request(), settings=OperatorProfileSettings(warmup_steps=3, steps=3, max_seconds=4)
    )
    timed = {**request.run.keys(), "status": "ok", "step_time_s": {"median": 1.0}}
    profile = opprofile.perform_operator_profile(request, tiny_model, tiny_data(), timed_run=timed)
    # Planned at the timed runs' 1 s per step, re-planned at the warm-up steps' real speed.
    assert profile.document["status"] == "ok"
    assert profile.document["warmup_steps_run"] >= 1 and profile.document["profiled_steps"] >= 1


def test_expected_step_time_reads_the_run_document():
    assert runner.expected_step_time({"status": "ok", "step_time_s": {"median": 0.2}}) == 0.2
    over = {"status": "over_budget", "single_step_time_s": 13.0, "step_time_s": None}
    assert runner.expected_step_time(over) == 13.0
    assert runner.expected_step_time({"status": "oom", "single_step_time_s": None}) is None
    assert runner.expected_step_time(None) is None


def test_layer_ranges_mark_forward_calls_and_leave_no_hooks():
    model = tiny_model()
    ranges = opprofile.LayerRanges([("(model)", model), *model.named_children()])
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        model(torch.zeros(2, 3, 32, 32))
    ranges.remove()
    names = {event.name for event in profiler.events()}
    assert {"nnperf_module:(model)", "nnperf_module:0", "nnperf_module:5"} <= names
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_device_notes():
    analysis = operators.analyse(
        {
            "traceEvents": [
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": "nnperf_step#0",
                    "pid": 1,
                    "tid": 1,
                    "ts": 0.0,
                    "dur": 10.0,
                    "args": {},
                }
            ]
        },
        "cuda",
    )
    assert opprofile._device_notes("cuda", analysis) == [{"code": "no_cuda_kernels"}]
    assert opprofile._device_notes("mps", analysis) == [{"code": "mps_no_kernels"}]
    assert opprofile._device_notes("cpu", analysis) == []


def test_describe_outcome_is_one_line(resnet):
    document, _ = resnet
    request = OperatorProfileRequest(
        run=RunRequest(device="cpu", model="resnet18_cifar", precision="fp32", batch_size=BATCH)
    )
    line = opprofile.describe_outcome(request, document)
    assert line.startswith("resnet18_cifar cpu fp32 bs4 baseline: profiled 2 steps")
    assert "\n" not in line and not math.isnan(document["summary"]["step_time_s"])


OOM_SCRIPT = """
import json, resource, sys
sys.path.insert(0, {tests!r})
from tiny_training import tiny_data, tiny_model, tiny_request
from nnperf.core.contract import OperatorProfileRequest, OperatorProfileSettings
from nnperf.torchprof.profile import perform_operator_profile
with open("/proc/self/status") as status:
    vm_kib = next(int(line.split()[1]) for line in status if line.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (vm_kib * 1024 + 512 * 2**20, resource.RLIM_INFINITY))
request = OperatorProfileRequest(run=tiny_request(batch_size=8), settings=OperatorProfileSettings())
profile = perform_operator_profile(request, tiny_model, tiny_data(input_size=1024))
print(json.dumps({{"status": profile.document["status"], "error": profile.document["error"],
                  "operators": len(profile.tables["operators"]),
                  "trace": json.loads(__import__("gzip").decompress(profile.trace))}}))
"""


def test_running_out_of_memory_is_a_result(repo):
    """A real out-of-memory profile: a subprocess under RLIMIT_AS, 1024x1024 inputs (the first
    convolution's output alone is 8 x 8 x 1024^2 x 4 B = 256 MiB, the headroom 512 MiB)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", OOM_SCRIPT.format(tests=str(repo / "tests"))],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=repo,
        env={"PYTHONPATH": str(repo / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "oom"
    assert "\n" not in result["error"] and result["error"]
    assert result["operators"] == 0
    assert result["trace"]["traceEvents"] == [] and result["trace"]["nnperf"]["status"] == "oom"


def test_profiled_steps_stop_at_the_deadline():
    """A deadline already passed: the first profiled step is made the last one (it waits
    for the device inside its range) and no other runs."""
    import time

    from nnperf.engine.build import build

    training = build(tiny_request(), tiny_model, tiny_data(), 0)
    training.step()
    profiled = opprofile.profile_steps(
        training, 5, False, deadline=time.perf_counter(), step_time_s=1.0
    )
    assert profiled.steps == 1
    steps = [
        e for e in read_trace_bytes(profiled.trace)["traceEvents"] if "nnperf_step#" in e["name"]
    ]
    assert [e["name"] for e in steps] == ["nnperf_step#0"]
    assert len(profiled.inventory["gradients"]) == 1


def read_trace_bytes(raw: bytes) -> dict:
    return json.loads(gzip.decompress(raw))


def test_the_request_round_trips_and_bad_settings_are_one_line(tmp_path):
    from nnperf.core import contract

    request = OperatorProfileRequest(
        run=tiny_request("bf16", batch_size=16),
        settings=OperatorProfileSettings(steps=2, layer_depth=2, batch_sizes=(16,)),
    )
    data = contract.to_dict(request)
    assert json.loads(json.dumps(data)) == data
    assert contract.from_dict(OperatorProfileRequest, data) == request
    contract.write_request(tmp_path / "request.json", request)
    assert contract.read_request(OperatorProfileRequest, tmp_path / "request.json") == request
    defaults = contract.to_dict(OperatorProfileSettings())
    assert defaults == {
        "enabled": True,
        "warmup_steps": 3,
        "steps": 3,
        "max_seconds": 20.0,
        "top_operators": 10,
        "label_layers": True,
        "layer_depth": None,
        "with_stack": False,
        "batch_sizes": None,
        "variants": None,
        "precisions": None,
    }
    for bad, message in (
        ({"steps": 0}, "operator_profile.steps = 0 is not allowed; allowed: an integer >= 1"),
        ({"max_seconds": 0}, "operator_profile.max_seconds = 0.0 is not allowed"),
        ({"layer_depth": 0}, "operator_profile.layer_depth = 0 is not allowed"),
        ({"with_stacks": True}, "with_stacks is not a setting of OperatorProfileSettings"),
    ):
        with pytest.raises(NnperfError, match=message.replace("(", r"\(")) as info:
            contract.from_dict(OperatorProfileSettings, bad)
        assert "\n" not in str(info.value)


# --- one-time steps -------------------------------------------------------------------------


class SlowFirstCall(torch.nn.Module):
    """The tiny model, whose first forward call sleeps: a first step carrying a one-time
    cost (as cuDNN autotuning or compilation does on a GPU), later steps fast."""

    def __init__(self, seconds: float):
        super().__init__()
        self.net = tiny_model()
        self.seconds = seconds
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 1:
            time.sleep(self.seconds)
        return self.net(x)


def test_a_slow_first_step_is_a_one_time_cost_and_the_profile_runs():
    """A 3 s first step and a 2 s budget: planned from the first step, one warm-up and one
    profiled step (3 + 4.5 s) would not fit; planned from the steady steps (milliseconds on a
    quiet machine, a few tenths of a second on a busy one), they do."""
    settings = OperatorProfileSettings(warmup_steps=2, steps=2, max_seconds=2.0)
    request = OperatorProfileRequest(run=tiny_request(), settings=settings)
    profile = opprofile.perform_operator_profile(request, lambda: SlowFirstCall(3.0), tiny_data())
    document = profile.document
    first, steady = document["warmup_step_time_s"]
    assert opprofile.plan_steps(first, settings) is None  # the first step as the basis: refused
    assert document["status"] == "ok", document["error"]
    assert first >= 3.0 and steady < first / 5
    assert document["one_time_steps"] == 1 and document["cost"]["one_time_s"] == first
    assert document["unprofiled_step_time_s"] == steady
    assert document["profiled_steps"] >= 1 and document["single_step_time_s"] is None


def fake_steps(monkeypatch, seconds: list[float]) -> list[float]:
    """`timed_step` on a fake clock: each call returns the next of `seconds` and runs
    nothing; returns the list, which empties as steps are taken."""
    left = list(seconds)
    monkeypatch.setattr(opprofile, "timed_step", lambda training: left.pop(0))
    return left


CPU_TRAINING = types.SimpleNamespace(device=torch.device("cpu"))


@pytest.mark.parametrize(
    ("steps_s", "one_time", "expected_s", "basis_s"),
    [
        # Eager with cudnn_benchmark on an H100: a 12 s autotuning step, then 10.4 ms steps.
        ([12.0, 0.0104, 0.0104], 1, None, 0.0104),
        # reduce-overhead: compilation (18 s), CUDA-graph recording (0.51 s), then replays.
        ([18.0, 0.51, 0.0124], 2, None, 0.0124),
        # With the timed runs' steady step, that is the basis, not the profile's own steps.
        ([12.0, 0.02, 0.02], 1, 0.0104, 0.0104),
        # Compilation longer than the whole budget is no reason to refuse: it is one-time.
        ([199.0, 0.0041, 0.0041], 1, 0.0041, 0.0041),
    ],
)
def test_the_plan_uses_the_steady_step(monkeypatch, steps_s, one_time, expected_s, basis_s):
    """Three warm-up steps asked for: all are run, and the plan for the profiled steps is
    made at the steady step, whatever the one-time steps took."""
    left = fake_steps(monkeypatch, steps_s)
    settings = OperatorProfileSettings(warmup_steps=3, steps=3, max_seconds=20)
    times: list[float] = []
    budget = opprofile.warm_up(CPU_TRAINING, settings, one_time, expected_s, times)
    assert budget.step_time_s == basis_s
    assert times == steps_s and not left
    assert (budget.plan.warmup_steps, budget.plan.profiled_steps) == (0, 3)


def test_a_one_time_cost_past_its_bound_is_over_budget_without_a_step_time(monkeypatch):
    fake_steps(monkeypatch, [500.0, 150.0, 0.01])
    settings = OperatorProfileSettings(warmup_steps=3, steps=3, max_seconds=20)
    times: list[float] = []
    with pytest.raises(opprofile.OverBudget) as info:
        opprofile.warm_up(
            CPU_TRAINING,
            settings,
            2,
            None,
            times,
            "torch.compile compilation and CUDA-graph recording",
        )
    assert times == [500.0, 150.0]  # stopped at the one-time step that passed the bound
    assert info.value.step_time_s is None and info.value.source == opprofile.ONE_TIME_SOURCE
    assert str(info.value) == (
        "the one-time cost (torch.compile compilation and CUDA-graph recording) took 650 s in "
        "the first 2 steps, past the 600 s a profile allows for it (ONE_TIME_MAX_S or "
        "operator_profile.max_seconds); no steady step was measured"
    )
    # A profile granted more than ONE_TIME_MAX_S grants its one-time steps as much.
    assert opprofile.one_time_limit_s(OperatorProfileSettings(max_seconds=3600)) == 3600


def test_a_slow_steady_step_is_over_budget_with_its_own_time(monkeypatch):
    fake_steps(monkeypatch, [20.0, 13.0, 13.0])
    settings = OperatorProfileSettings(warmup_steps=3, steps=3, max_seconds=10)
    with pytest.raises(opprofile.OverBudget) as info:
        opprofile.warm_up(CPU_TRAINING, settings, 1, None, [])
    assert (info.value.step_time_s, info.value.source) == (13.0, "warm-up step")
    assert "about 19.5 s at the warm-up step's 13 s per step" in str(info.value)


def test_the_document_of_a_one_time_cost_past_its_bound(monkeypatch, tmp_path):
    fake_steps(monkeypatch, [700.0])
    request = OperatorProfileRequest(
        run=tiny_request(settings={"compile": "default"}), settings=OperatorProfileSettings()
    )
    document = opprofile.perform_operator_profile(request, tiny_model, tiny_data()).document
    assert document["status"] == "over_budget"
    assert document["error"].startswith("the one-time cost (torch.compile compilation) took 700 s")
    assert document["single_step_time_s"] is None  # the one-time step is no step time
    assert document["cost"]["one_time_s"] == 700.0 and document["warmup_step_time_s"] == [700.0]


@pytest.mark.parametrize(
    ("variant", "device", "warmup_steps", "steps"),
    [
        ({}, "cuda", 3, 1),
        ({"cudnn_benchmark": True}, "cuda", 3, 1),
        ({}, "cpu", 0, 0),  # warmup_steps 0: a cold profile, as asked
        ({"compile": "default"}, "cuda", 3, 1),
        ({"compile": "default"}, "cpu", 0, 1),  # compilation is never profiled
        ({"compile": "reduce-overhead"}, "cuda", 3, 2),  # + CUDA-graph recording
        ({"compile": "max-autotune"}, "cuda", 1, 2),
        ({"compile": "reduce-overhead"}, "cpu", 3, 1),  # no CUDA graphs on a CPU
    ],
)
def test_how_many_warm_up_steps_are_one_time(variant, device, warmup_steps, steps):
    settings = parse_variant_settings(variant)
    assert opprofile.profile_one_time_steps(settings, device, warmup_steps) == steps


def test_a_timed_step_that_fits_without_the_one_time_step_is_profiled():
    """5 s steady steps and a 10 s budget: one profiled step (7.5 s) fits once the first
    warm-up step is paid as a one-time cost; it did not when it was paid from the budget."""
    settings = OperatorProfileSettings(warmup_steps=3, steps=3, max_seconds=10)
    assert opprofile.plan_steps(5.0, settings, warmups_done=0) is None
    plan = opprofile.plan_steps(5.0, settings, warmups_done=1)
    assert (plan.warmup_steps, plan.profiled_steps) == (0, 1)


def test_a_cpu_profile_prints_no_cuda_probe_error():
    """torch.profiler on a CPU-only run: Kineto's CUDA probe ("gpuGetDeviceCount failed")
    is not printed as an ERROR on a run that succeeds (a CUDA build of torch without a GPU,
    as the pinned environment is on CI)."""
    import subprocess
    import sys

    code = (
        "import torch\n"
        "from nnperf.torchprof.steps import profiling\n"
        "with profiling('cpu', with_stack=False):\n"
        "    torch.ones(8, 8) @ torch.ones(8, 8)\n"
        "print('profiled')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "profiled" in result.stdout
    assert "gpuGetDeviceCount" not in result.stderr
