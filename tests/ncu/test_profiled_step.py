"""The NVTX-marked step: runs end to end on the CPU, sidecar contents, range names."""

from __future__ import annotations

import pytest

from nnperf.core.contract import ProfileStepRequest
from nnperf.ncu import ranges
from nnperf.ncu import profiled_step as profile_step
from nnperf.ncu.profiled_step import perform_profile_step
from tiny_training import tiny_data, tiny_model, tiny_request


def test_range_names_are_the_contract_with_the_ncu_stream():
    assert profile_step.STEP_RANGE == ranges.STEP_RANGE == "nnperf_step"
    assert profile_step.CALIBRATION_RANGE == ranges.CALIBRATION_RANGE == "nnperf_calibration_gemm"
    assert profile_step.PHASE_RANGES == ranges.PHASE_RANGES == ("forward", "backward", "optimizer")
    assert profile_step.CALIBRATION_GEMM_MNK == ranges.CALIBRATION_GEMM_MNK


@pytest.mark.parametrize(
    ("m", "n", "k", "flops"), [(4096, 4096, 4096, 137_438_953_472), (2, 3, 4, 48), (1, 1, 1, 2)]
)
def test_gemm_flops_hand_computed(m, n, k, flops):
    assert ranges.gemm_flops(m, n, k) == flops


@pytest.mark.parametrize(("precision", "dtype"), [("fp32", "float32"), ("bf16", "bfloat16")])
def test_profile_step_on_cpu_writes_the_sidecar_fields(precision, dtype):
    request = ProfileStepRequest(run=tiny_request(precision), calibration_gemm_size=64)
    document = perform_profile_step(request, tiny_model, tiny_data())
    assert document["kind"] == "profile_step" and document["status"] == "ok"
    assert document["nvtx"] == {
        "api": "torch.cuda.nvtx.range_start/range_end",
        "active": document["nvtx"]["active"],
        "step_range": "nnperf_step",
        "phase_ranges": ["forward", "backward", "optimizer"],
        "calibration_range": "nnperf_calibration_gemm",
    }
    gemm = document["calibration_gemm"]
    assert (gemm["m"], gemm["n"], gemm["k"]) == (64, 64, 64)
    assert gemm["flops"] == 2 * 64**3 and gemm["dtype"] == dtype
    assert gemm["wall_time_s"] > 0
    assert document["step"]["loss"] > 0 and document["step"]["wall_time_s"] > 0
    assert document["environment"]["device"] == "cpu"
    assert (document["precision"], document["batch_size"], document["warmup_steps"]) == (
        precision,
        8,
        2,
    )


def test_default_calibration_gemm_is_the_one_the_parser_checks(monkeypatch):
    """Without calibration_gemm_size the GEMM is ranges.CALIBRATION_GEMM_MNK (shrunk here so the
    test stays fast: the request's None must reach the module constant, not a copy of it)."""
    monkeypatch.setattr(profile_step, "CALIBRATION_GEMM_MNK", (32, 48, 16))
    document = perform_profile_step(ProfileStepRequest(run=tiny_request()), tiny_model, tiny_data())
    gemm = document["calibration_gemm"]
    assert (gemm["m"], gemm["n"], gemm["k"], gemm["flops"]) == (32, 48, 16, 2 * 32 * 48 * 16)


def test_nvtx_range_is_harmless_without_a_profiler():
    with profile_step.nvtx_range("nnperf_test", enabled=profile_step._nvtx_available()):
        pass
    with profile_step.nvtx_range("nnperf_test", enabled=False):
        pass
