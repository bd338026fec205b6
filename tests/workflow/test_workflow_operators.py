"""The operator-profile stage on the tiny config (the session's real `tiny_study` run):
a valid Chrome trace with the step's operators, tables that add up to the profiled steps'
time, the figures, and a summary whose findings cite them."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from nnperf.core import files, layout
from nnperf.report.results import opprofile_table_paths

pytestmark = pytest.mark.workflow

PROFILED = [
    {"device": "cpu", "model": "resnet18_cifar", "precision": p, "batch_size": 4, "variant": v}
    for p in ("fp32", "bf16")
    for v in ("baseline", "tuned")
]


def _path(study, kind, keys):
    return study / layout.path(kind, dataset="synthetic", **keys)


def test_every_selected_configuration_is_profiled_and_only_those(tiny_study):
    documents = sorted((tiny_study / "results/opprofiles").rglob("*.json"))
    assert len(documents) == len(PROFILED)  # batch 8 is left out by operator_profile.batch_sizes
    for keys in PROFILED:
        document = files.read_json(_path(tiny_study, "opprofile", keys))
        assert document["kind"] == "operator_profile"
        assert {k: document[k] for k in keys} == keys
        assert document["status"] in ("ok", "over_budget")
        for kind in ("opprofile_trace", "operators_figure", "memory_figure"):
            assert _path(tiny_study, kind, keys).stat().st_size > 0, kind


def _ok(study):
    ok = [k for k in PROFILED if files.read_json(_path(study, "opprofile", k))["status"] == "ok"]
    assert any(k["precision"] == "fp32" for k in ok)  # fp32 fits the budget on any CPU
    return ok


def test_the_trace_is_chrome_trace_json_with_the_steps_operators(tiny_study):
    for keys in _ok(tiny_study):
        trace = json.loads(gzip.decompress(_path(tiny_study, "opprofile_trace", keys).read_bytes()))
        names = {event.get("name") for event in trace["traceEvents"]}
        assert {"aten::convolution", "aten::addmm", "nnperf_step#0"} <= names
        assert any(name.startswith("nnperf_module:layer1") for name in names if name)
        complete = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
        assert complete and all("ts" in e and "dur" in e for e in complete)
        assert trace["nnperf"]["variant"] == keys["variant"]


def test_the_tables_add_up_to_the_profiled_steps(tiny_study):
    for keys in _ok(tiny_study):
        tables = {
            name: pd.read_csv(path)
            for name, path in opprofile_table_paths(_path(tiny_study, "opprofile", keys)).items()
        }
        step = tables["steps"]["step_time_s"].mean()
        # Host self time of every operator (and the time outside them) is the step.
        assert tables["operators"]["host_self_time_s"].sum() == pytest.approx(step, rel=0.10)
        # Every layer named is a module of the model; together they hold part of the step.
        layers = tables["layers"]
        assert layers["layer"].str.contains("layer1").any()
        assert 0 < layers["host_time_s"].sum() <= step * 1.10
        memory = tables["memory"].set_index("category")
        peak = files.read_json(_path(tiny_study, "opprofile", keys))["memory"][
            "peak_allocated_bytes"
        ]
        assert memory["bytes"].sum() == peak
        assert memory.loc["parameters", "bytes"] == memory.loc["parameters", "estimate_bytes"]


def test_the_summary_cites_the_operator_profiles(tiny_study):
    md = (tiny_study / "reports/synthetic/summary.md").read_text(encoding="utf-8")
    section = md.split("\n## Operators, layers and memory\n", 1)[1].split("\n## ", 1)[0]
    for title in ("Where each profiled step goes", "Top operators", "Top layers", "Peak memory"):
        assert title in section
    assert "inside operators" in section and "peaks at" in section
    assert "results/opprofiles/synthetic/cpu/resnet18_cifar/fp32/bs4/baseline.json" in section
    assert "operators/synthetic/cpu/resnet18_cifar/fp32/bs4/baseline" in section  # a figure
    key = md.split("## Key findings", 1)[1].split("\n## ", 1)[0]
    assert "of its step inside operators" in key or "the device is busy" in key
