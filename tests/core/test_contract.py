"""The contract: schema and dataclasses agree key by key, requests round-trip, paths both ways."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from nnperf.core import codehash, contract, layout, vocab
from nnperf.core import config as study_config
from nnperf.core.errors import NnperfError
from nnperf.core.jobs import logged_job
from nnperf.core.settings import MIN_SECONDS_SHARE
from nnperf.study.loading import load_study

from conftest import REPO


@pytest.fixture(scope="module")
def schema():
    return study_config.load_schema(REPO / "workflow/schemas/config.schema.yaml")


def test_schema_defaults_are_the_dataclass_defaults(schema):
    """Every key and every default of the schema, and nothing else, is in StudyConfig; a
    null that stands for a share of another key is that share once the dataclass is built."""
    defaults = study_config.validate({}, schema)
    assert defaults["timing"]["min_seconds"] is None
    assert _resolved(defaults) == contract.to_dict(contract.StudyConfig())


def _resolved(config: dict) -> dict:
    """`config` with the nulls that stand for a share of another key resolved, as the
    settings dataclasses resolve them (timing.min_seconds)."""
    timing = dict(config["timing"])
    if timing["min_seconds"] is None:
        timing["min_seconds"] = MIN_SECONDS_SHARE * timing["max_seconds"]
    return {**config, "timing": timing}


def test_max_seconds_alone_sets_a_budget():
    """`timing={max_seconds: 10}` over the default study is a budget (min_seconds was 20 and
    refused it): a null min_seconds is a third of max_seconds, wherever the settings come
    from; the default study keeps its 20 s of 60, and an explicit min_seconds above
    max_seconds is still one line."""
    shipped = load_study(detect=lambda: "cpu").typed.timing
    assert (shipped.min_seconds, shipped.max_seconds) == (20.0, 60.0)
    small = load_study(config_entries=["timing={max_seconds: 10}"], detect=lambda: "cpu")
    assert small.typed.timing.min_seconds == pytest.approx(10 / 3)
    assert small.typed.timing.max_seconds == 10.0
    assert contract.TimingSettings(max_seconds=4).min_seconds == pytest.approx(4 / 3)
    assert contract.TimingSettings(min_seconds=0, max_seconds=4).min_seconds == 0
    # The resolved number is what crosses into a job, and it comes back the same.
    data = contract.to_dict(contract.TimingSettings(max_seconds=9))
    assert data["min_seconds"] == pytest.approx(3.0)
    assert contract.from_dict(contract.TimingSettings, data).min_seconds == data["min_seconds"]
    with pytest.raises(NnperfError) as info:
        load_study(config_entries=["timing={min_seconds: 30, max_seconds: 10}"], detect=lambda: "cpu")
    assert str(info.value).endswith(
        "timing.min_seconds = 30.0 is larger than timing.max_seconds = 10.0; allowed: "
        "min_seconds <= max_seconds"
    )
    assert "\n" not in str(info.value)


def test_every_section_maps_to_one_settings_class(schema):
    def walk(node: dict, cls: type, where: str) -> None:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert set(node["properties"]) == set(fields), where
        hints = __import__("typing").get_type_hints(cls)
        for name, spec in node["properties"].items():
            if dataclasses.is_dataclass(hints[name]):
                walk(spec, hints[name], f"{where}.{name}")

    walk(schema, contract.StudyConfig, "config")
    variant = schema["$defs"]["variant"]
    assert set(variant["properties"]) == {
        f.name for f in dataclasses.fields(contract.VariantSettings)
    }
    defaults = {name: spec["default"] for name, spec in variant["properties"].items()}
    assert defaults == contract.to_dict(contract.VariantSettings())
    recipe = schema["$defs"]["recipe"]
    assert set(recipe["properties"]) == {
        f.name for f in dataclasses.fields(contract.ConvergenceSettings)
    }
    defaults = {name: spec["default"] for name, spec in recipe["properties"].items()}
    assert defaults == contract.to_dict(contract.ConvergenceSettings())
    assert recipe["properties"]["optimizer"]["enum"] == list(vocab.TRAINING_OPTIMIZERS)
    assert recipe["properties"]["schedule"]["enum"] == list(vocab.LR_SCHEDULES)
    assert schema["properties"]["recipes"]["default"] == {vocab.DEFAULT_RECIPE: {}}


def _enum(schema: dict, *path: str) -> list:
    node = schema
    for key in path:
        node = node[key]
    return node["enum"]


def test_schema_enums_are_the_vocabulary(schema):
    props = schema["properties"]
    variant = schema["$defs"]["variant"]["properties"]
    assert props["precisions"]["items"]["enum"] == list(vocab.PRECISIONS)
    assert props["devices"]["items"]["enum"] == [vocab.AUTO_DEVICE, *vocab.DEVICES]
    assert props["dataset"]["properties"]["name"]["enum"] == list(vocab.DATASET_NAMES)
    assert props["training"]["properties"]["optimizer"]["enum"] == list(vocab.OPTIMIZERS)
    assert props["ncu"]["properties"]["enabled"]["enum"] == list(vocab.NCU_ENABLED)
    assert props["ncu"]["properties"]["clock_control"]["enum"] == list(vocab.CLOCK_CONTROLS)
    assert variant["compile"]["enum"] == list(vocab.COMPILE_MODES)
    assert variant["optimizer_impl"]["enum"] == list(vocab.OPTIMIZER_IMPLS)
    assert variant["data_path"]["enum"] == list(vocab.DATA_PATHS)
    assert props["variants"]["default"] == {vocab.REFERENCE_VARIANT: {}}


@pytest.mark.parametrize("name", ["config.yaml", "gpu.yaml"])
def test_shipped_studies_become_typed_studies(schema, name):
    base = yaml.safe_load((REPO / "config/config.yaml").read_text())
    layer = yaml.safe_load((REPO / "config" / name).read_text())
    merged = study_config.overlay_study({**base, **layer}, [layer])
    validated = study_config.validate(merged, schema)
    study = contract.from_dict(contract.StudyConfig, validated)
    assert contract.to_dict(study) == _resolved(validated)
    assert set(study.variants) == set(layer["variants"])
    assert all(isinstance(v, contract.VariantSettings) for v in study.variants.values())


def test_requests_round_trip_through_plain_data_and_json(tmp_path):
    run = contract.RunRequest(
        device="cpu",
        model="resnet18_cifar",
        precision="bf16",
        batch_size=16,
        variant="tuned",
        settings=contract.VariantSettings(channels_last=True, compile="reduce-overhead"),
        training=contract.TrainingSettings(momentum=0.0, timed_steps=5, seed=7),
        timing=contract.TimingSettings(target_ci=0.02, max_processes=4),
    )
    request = contract.ProfileStepRequest(run=run, calibration_gemm_size=512)
    data = contract.to_dict(request)
    json.dumps(data)  # plain data only
    assert contract.from_dict(contract.ProfileStepRequest, data) == request
    path = tmp_path / "request.json"
    contract.write_request(path, request)
    assert contract.read_request(contract.ProfileStepRequest, path) == request
    assert run.seed_of(0) == 7 and run.seed_of(2) == 9 and run.header()["momentum"] == 0.0
    assert "rep" not in run.header() and run.header()["timing"]["target_ci"] == 0.02
    # Null target: the device's default, resolved in the header the document carries.
    default_target = contract.RunRequest(device="cuda", model="m", precision="bf16", batch_size=1)
    assert (
        default_target.target_ci == 0.01 and default_target.header()["timing"]["target_ci"] == 0.01
    )


@pytest.mark.parametrize(
    ("cls", "data", "message"),
    [
        (
            contract.TrainingSettings,
            {"lr": "fast"},
            "lr = 'fast' has the wrong type; expected a number",
        ),
        (
            contract.TrainingSettings,
            {"warmup": 3},
            "warmup is not a setting of TrainingSettings; allowed: warmup_steps",
        ),
        (contract.RunRequest, {"device": "cpu"}, "RunRequest: "),
        (
            contract.ProfileStepRequest,
            {"run": {"device": "cpu", "model": "m", "precision": "fp32", "batch_size": True}},
            "run.batch_size = True has the wrong type; expected an integer",
        ),
        (
            contract.VariantSettings,
            {"prefetch_factor": 2},
            "prefetch_factor=2 needs num_workers > 0",
        ),
    ],
)
def test_bad_request_data_is_one_line_naming_the_key(cls, data, message):
    with pytest.raises(NnperfError) as info:
        contract.from_dict(cls, data)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_read_request_names_the_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(
        '{"run": {"device": "cpu", "model": "m", "precision": "fp32", "batch_size": 4, "colour": 1}}'
    )
    with pytest.raises(NnperfError, match=r"bad.json: run.colour is not a setting of RunRequest"):
        contract.read_request(contract.ProfileStepRequest, path)
    with pytest.raises(NnperfError, match="request file not found"):
        contract.read_request(contract.ProfileStepRequest, tmp_path / "missing.json")


def test_precisions_sort_in_one_order_everywhere():
    assert vocab.sort_precisions(["bf16", "fp8", "fp16", "fp32", "tf32", "bf16"]) == [
        "fp32",
        "tf32",
        "fp16",
        "bf16",
        "fp8",
    ]


KEYS = st.fixed_dictionaries(
    {
        "dataset": st.sampled_from(vocab.DATASETS),
        "device": st.sampled_from(vocab.DEVICES),
        "model": st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True),
        "precision": st.sampled_from(vocab.PRECISIONS),
        "batch_size": st.integers(1, 100_000),
        "variant": st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True),
    }
)


@given(KEYS)
def test_paths_parse_back_to_their_keys(keys):
    for kind in ("run", "run_windows", "run_steps"):
        assert layout.parse(kind, layout.path(kind, **keys)) == keys
    for kind in ("profile_request", "profile_csv", "roofline_figure"):
        assert layout.parse(kind, "/some/where/" + layout.path(kind, **keys)) == keys


def test_layout_errors_and_logs():
    with pytest.raises(NnperfError, match="path 'run' needs key 'variant'"):
        layout.path(
            "run", dataset="synthetic", device="cpu", model="m", precision="fp32", batch_size=1
        )
    with pytest.raises(NnperfError, match="is not a run path"):
        layout.parse("run", "results/runs/synthetic/cpu/m/fp64/bs1/v.json")
    assert (
        layout.log("run")
        == "logs/runs/{dataset}/{device}/{model}/{precision}/bs{batch_size}/{variant}.log"
    )
    assert layout.log("table", dataset="cifar10", name="runs") == "logs/tables/cifar10/runs.log"
    assert layout.log("dataset", dataset="synthetic") == "logs/data/synthetic.log"
    assert layout.log("summary_html", dataset="synthetic") == "logs/reports/synthetic/summary.log"
    assert layout.log("summary_md", dataset="synthetic") == layout.log(
        "summary_html", dataset="synthetic"
    )


def test_every_file_that_depends_on_the_data_names_its_dataset():
    """Two studies on different data write beside each other: every result whose numbers
    depend on the data carries the dataset in its path; only the data itself and the
    machine's ceilings do not."""
    independent = {"dataset", "ceilings", "ceilings_figure"}
    for kind in layout.TEMPLATES:
        if kind not in independent:
            assert "dataset" in layout.fields(kind), kind
    keys = {"device": "cpu", "model": "m", "precision": "fp32", "batch_size": 8, "variant": "v"}
    for kind in ("run", "profile_csv", "roofline_figure"):
        assert layout.path(kind, dataset="synthetic", **keys) != layout.path(
            kind, dataset="cifar10", **keys
        )


def test_engine_hash_covers_what_the_engine_imports_and_nothing_else(tmp_path, monkeypatch):
    engine = codehash.closure("nnperf.engine.runner")
    assert {
        "nnperf.engine.timing",
        "nnperf.engine.step",
        "nnperf.core.contract",
        "nnperf.core.vocab",
    } <= set(engine)
    assert not any(
        name.startswith("nnperf.report.plots") or name == "nnperf.report.render" for name in engine
    )
    # A copy of the package: editing a module the engine imports changes the hash.
    package = tmp_path / "nnperf"
    import shutil

    shutil.copytree(codehash.PACKAGE_DIR, package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(codehash, "PACKAGE_DIR", package)
    codehash.closure.cache_clear()
    before = codehash.code_hash("nnperf.engine.runner")
    report = package / "report" / "render.py"
    report.write_text(report.read_text() + "\n# edited\n")
    assert codehash.code_hash("nnperf.engine.runner") == before
    timing = package / "engine" / "timing.py"
    timing.write_text(timing.read_text() + "\n# edited\n")
    assert codehash.code_hash("nnperf.engine.runner") != before
    codehash.closure.cache_clear()


def test_logged_job_turns_a_bad_input_into_one_line(tmp_path, capfd):
    log = tmp_path / "logs" / "job.log"
    with pytest.raises(SystemExit) as info:
        with logged_job(log, "timed_run"):
            print("starting")
            raise NnperfError("device 'cuda' is not available on this machine")
    assert info.value.code == 2
    text = log.read_text()
    assert "starting" in text
    assert "nnperf timed_run: error: device 'cuda' is not available on this machine" in text
    assert "nnperf timed_run: error: device 'cuda'" in capfd.readouterr().err
    with pytest.raises(SystemExit) as info:
        with logged_job(log, "timed_run"):
            raise ValueError("boom")
    assert info.value.code == 1
    assert "Traceback" in log.read_text() and "ValueError: boom" in log.read_text()
    assert sys.stdout is sys.__stdout__ or sys.stdout is not None


def test_a_scripts_code_hash_follows_what_the_script_imports(tmp_path, monkeypatch):
    scripts = Path(__file__).resolve().parents[2] / "workflow" / "scripts"
    package = tmp_path / "nnperf"
    import shutil

    shutil.copytree(codehash.PACKAGE_DIR, package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(codehash, "PACKAGE_DIR", package)
    codehash.closure.cache_clear()
    names = ("aggregate_runs", "plot_roofline", "timed_group")
    before = {name: codehash.script_code(scripts / f"{name}.py") for name in names}
    plot = package / "report" / "plots" / "roofline.py"
    plot.write_text(plot.read_text() + "\n# edited\n")
    codehash.closure.cache_clear()
    after = {name: codehash.script_code(scripts / f"{name}.py") for name in names}
    assert [n for n in names if after[n] != before[n]] == ["plot_roofline"]
    aggregate = package / "report" / "aggregate.py"
    aggregate.write_text(aggregate.read_text() + "\n# edited\n")
    codehash.closure.cache_clear()
    last = {name: codehash.script_code(scripts / f"{name}.py") for name in names}
    assert [n for n in names if last[n] != after[n]] == ["aggregate_runs", "plot_roofline"]
    codehash.closure.cache_clear()
