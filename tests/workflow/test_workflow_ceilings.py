"""The ceilings rules in a real Snakemake run of the tiny config."""

from __future__ import annotations

import json

import pytest
from conftest import TINY_CONFIG, run_snakemake

pytestmark = pytest.mark.workflow


def test_ceilings_rules_build_json_and_sweep_figure(workdir, repo):
    target = "results/figures/ceilings/cpu_sweep.png"
    result = run_snakemake(workdir, target, "--configfile", str(TINY_CONFIG))
    assert result.returncode == 0, result.stderr
    doc = json.loads((workdir / "results/ceilings/cpu.json").read_text())
    assert doc["schema_version"] == 1 and doc["device"] == "cpu"
    # The config's ceilings section reached the measurement through the request.
    assert doc["settings"]["gemm_sizes"] == [64, 128] and doc["settings"]["trials"] == 2
    # The datasheet peaks are nnperf's own file, the checkout's, wherever the study runs.
    assert doc["settings"]["peaks"] == str(repo / "config/peaks.yaml")
    assert doc["measured"]["bandwidth"]["array_bytes"] == 16 * 1024**2
    sweep = [p["working_set_bytes"] for p in doc["measured"]["sweep"]]
    assert sweep[0] == 16 * 1024 and sweep[-1] == 4 * 1024**2
    assert set(doc["measured"]["gemm_flop_s"]) == {"fp32", "bf16"}
    assert (workdir / target).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    log = (workdir / "logs/ceilings/cpu.log").read_text()
    assert f"{doc['device_name']} (cpu): fp32 " in log and "GFLOP/s" in log
