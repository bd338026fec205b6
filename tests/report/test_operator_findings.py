"""The operator profile's sentences and tables: verdicts with their busy share, top operators
and layers, memory and headroom, the input pipeline, and one note for a profile that did not run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from nnperf.report.sections.operators import (
    bound_record,
    input_record,
    memory_record,
    profile_records,
    top_operators_display,
)
from nnperf.report.wording.words import sentence
from nnperf.torchprof import analysis as operators
from nnperf.torchprof import breakdown
from nnperf.torchprof import memory as step_memory
from op_traces import cpu_trace, cuda_trace

KEYS = {"model": "resnet18_cifar", "batch_size": 256, "variant": "baseline", "dataset": "synthetic"}


def document(analysis=None, device="cuda", precision="bf16", **fields) -> dict:
    return {
        **KEYS,
        "device": device,
        "precision": precision,
        "status": "ok",
        "error": None,
        "notes": [],
        "variant_settings": {"data_path": "dataloader", "num_workers": 0},
        "settings": {"top_operators": 10},
        "summary": analysis.summary if analysis else {},
        "memory": None,
        **fields,
    }


def bound_sentence(doc) -> str:
    return sentence(bound_record(doc))


def memory_sentence(doc) -> str:
    return sentence(memory_record(doc))


def input_pipeline_sentence(doc) -> str:
    return sentence(input_record(doc))


def profile_findings(doc, machine=None) -> list[str]:
    return [sentence(f) for f in profile_records(doc, machine)]


def tables(analysis) -> dict:
    return {"operators": analysis.operators, "layers": analysis.layers}


def h100_summary(busy_ms: float, step_ms: float) -> dict:
    """A summary with the H100's numbers (shared/h100/README.md: the eager bf16 step at
    batch 256 takes 10.4 ms, its kernels 6.7 ms; with CUDA graphs the step is 4.1 ms)."""
    share = busy_ms / step_ms
    return {
        "busy_kind": operators.BUSY_DEVICE,
        "bound": operators.bound(share),
        "bound_share": share,
        "busy_share": share,
        "step_time_s": step_ms * 1.1e-3,
        "timed_step_time_s": step_ms * 1e-3,
        "profiled_over_timed": 1.1,
        "device_busy_time_s": busy_ms * 1e-3,
        "host_dispatch_time_s": 9.1e-3,
        "launch_time_s": 2.3e-3,
    }


def test_eager_bf16_on_the_h100_reads_host_bound_and_cuda_graphs_device_bound():
    record = bound_record(document(summary=h100_summary(6.7, 10.4)))
    assert (record.about["verdict"], record.about["remedy"]) == ("host-bound", "host-bound")
    assert record.numbers["share"] == pytest.approx(6.7 / 10.4)
    eager = bound_sentence(document(summary=h100_summary(6.7, 10.4)))
    assert eager.startswith("resnet18_cifar bf16 at batch 256 (baseline) on cuda is host-bound")
    assert "busy only 64% of the step (6.70 ms of kernels in a 10.4 ms timed step)" in eager
    assert "9.10 ms per step issuing work (2.30 ms of it in launch calls)" in eager
    assert "CUDA graphs" in eager
    graphs = bound_sentence(document(summary=h100_summary(4.0, 4.1), variant="cudagraphs"))
    assert "(cudagraphs) on cuda is device-bound: the device is busy 98% of the step" in graphs
    assert "only faster kernels" in graphs


def test_a_gpu_trace_reads_host_bound_from_its_own_steps():
    sentence = bound_sentence(document(operators.analyse(cuda_trace(), "cuda")))
    assert "is host-bound: the device is busy only 42% of the step" in sentence
    assert "0.042 ms of kernels in a 0.1 ms profiled step" in sentence


def test_a_cpu_step_reads_by_its_operator_share():
    analysis = operators.analyse(cpu_trace(), "cpu")
    sentence = bound_sentence(document(analysis, device="cpu", precision="fp32"))
    assert sentence.startswith(
        "On cpu, resnet18_cifar fp32 at batch 256 (baseline) spends 59% of its step inside "
        "operators (0.059 ms of 0.1 ms per profiled step, on average)"
    )
    assert "the step is overhead-bound; a larger batch" in sentence


def test_a_profiler_that_slowed_the_step_is_said_to():
    summary = {**h100_summary(6.7, 10.4), "profiled_over_timed": 1.6}
    sentence = bound_sentence(document(summary=summary))
    assert "slowed the step 1.60x against the timed runs" in sentence


def top_rows(analysis, device: str, table: str, n: int) -> list[dict]:
    profile = SimpleNamespace(document=document(analysis, device=device), tables=tables(analysis))
    return top_operators_display([profile], table, n).to_dict("records")


def test_top_operators_by_device_time_on_a_gpu_and_host_time_on_a_cpu():
    first, second = top_rows(operators.analyse(cuda_trace(), "cuda"), "cuda", "operators", 2)
    assert (first["Operator"], first["Share"], first["Device (ms)"]) == (
        "aten::addmm",
        "20%",
        "0.02",
    )
    assert second["Operator"] == "aten::mm"
    rows = top_rows(operators.analyse(cpu_trace(), "cpu"), "cpu", "operators", 2)
    assert (rows[0]["Operator"], rows[0]["Share"], rows[0]["Host (ms)"]) == (
        "aten::convolution_backward",
        "16%",
        "0.016",
    )
    assert breakdown.OUTSIDE_OPERATORS_ROW not in [row["Operator"] for row in rows]


def test_top_layers_name_module_paths_with_forward_and_backward():
    fc, *_ = top_rows(operators.analyse(cuda_trace(), "cuda"), "cuda", "layers", 3)
    assert (fc["Layer"], fc["Share"], fc["Forward (ms)"], fc["Backward (ms)"]) == (
        "fc",
        "40%",
        "0.02",
        "0.02",
    )
    (conv,) = top_rows(operators.analyse(cpu_trace(), "cpu"), "cpu", "layers", 1)
    assert (conv["Layer"], conv["Share"], conv["Forward (ms)"], conv["Backward (ms)"]) == (
        "features.conv",
        "33%",
        "0.013",
        "0.02",
    )


def test_memory_sentence_with_the_estimate_and_the_headroom():
    memory = {
        "peak_allocated_bytes": 2_000_000_000,
        "parameters_bytes": 44_695_848,
        "gradients_bytes": 44_695_848,
        "optimizer_state_bytes": 44_695_848,
        "activations_bytes": 1_200_000_000,
        "other_bytes": 2_000_000_000 - 3 * 44_695_848 - 1_200_000_000,
        "buffers_bytes": 38_560,
        "batch_size": 256,
        "device_total_bytes": 80_000_000_000,
    }
    memory.update(step_memory.headroom(memory))
    doc = document(memory=memory, saved_activation_estimate_bytes=1_203_279_360)
    sentence = memory_sentence(doc)
    assert sentence.startswith("resnet18_cifar bf16 at batch 256 (baseline) on cuda peaks at 2 GB")
    assert "parameters 44.7 MB (2.2%)" in sentence and "activations 1.2 GB (60%)" in sentence
    assert "complexity stage counts 1.2 GB of saved activations" in sentence
    assert f"a batch of about {memory['max_batch_size']:,}" in sentence
    full = {**memory, "max_batch_size": 256}
    assert "No larger batch fits" in memory_sentence(document(memory=full))


def test_input_pipeline_cost_and_when_it_dominates():
    summary = {"input_time_s": 0.004, "input_share": 0.4, "data_wait_s": 0.0035, "h2d_s": 0.0005}
    sentence = input_pipeline_sentence(
        document(summary=summary, variant_settings={"data_path": "dataloader", "num_workers": 8})
    )
    assert "(a DataLoader with 8 workers) costs 4.00 ms per step (40% of the step)" in sentence
    assert "3.50 ms fetching batches and 0.5 ms copying" in sentence
    assert "waits on its input" in sentence
    resident = input_pipeline_sentence(
        document(
            summary={**summary, "input_share": 0.01},
            variant_settings={"data_path": "device_resident"},
        )
    )
    assert "batches drawn on the device" in resident and "waits on its input" not in resident


@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        ("unsupported", "torch.profiler failed to start: RuntimeError: CUPTI_ERROR", "cannot run"),
        ("over_budget", "one warm-up and one profiled step need about 33 s", "max_seconds"),
        ("oom", "OutOfMemoryError: CUDA out of memory.", "ran out of memory"),
    ],
)
def test_a_profile_that_did_not_run_is_one_note(status, error, expected):
    doc = document(status=status, error=error)
    findings = profile_findings(doc)
    assert len(findings) == 1
    assert findings[0].startswith("No operator profile for resnet18_cifar bf16 at batch 256")
    assert expected in findings[0] and error.rstrip(".") in findings[0]


def test_profile_findings_in_order_with_the_notes_last():
    analysis = operators.analyse(cuda_trace(), "cuda")
    cut = {"code": "steps_cut", "warmup_steps": 1, "profiled_steps": 1, "max_seconds": 30.0}
    doc = document(analysis, notes=[cut])
    kinds = [f.kind for f in profile_records(doc, machine="h100")]
    assert kinds == ["profile_bound", "profile_input", "profile_note"]
    findings = profile_findings(doc, machine="h100")
    assert "is host-bound" in findings[0]
    assert findings[1].startswith("The input pipeline of resnet18_cifar bf16 at batch 256")
    assert findings[-1].endswith(
        "cut to 1 warm-up and 1 profiled steps to fit operator_profile.max_seconds = 30 s."
    )


def test_a_compiled_variant_is_not_told_to_compile():
    summary = h100_summary(6.7, 10.4)
    compiled = document(summary=summary, variant_settings={"compile": "reduce-overhead"})
    assert bound_record(compiled).about["remedy"] == "compiled"
    sentence = bound_sentence(compiled)
    assert "CUDA graphs" not in sentence and sentence.endswith(
        "a larger batch helps more than faster kernels."
    )


def test_a_step_waiting_on_its_input_is_told_to_fix_that_first():
    summary = {**h100_summary(6.7, 10.4), "input_share": 0.3}
    sentence = bound_sentence(document(summary=summary))
    assert sentence.endswith("the input pipeline comes first: it alone takes 30% of the step.")
    device_bound = {**h100_summary(4.0, 4.1), "input_share": 0.3}
    assert "only faster kernels" in bound_sentence(document(summary=device_bound))
