"""What `workflow/rules/common.smk` asks the library while Snakemake builds the DAG: a
study's scope (matrix, devices, stage selections, notes), the request of each job, and the
checks at the edges of a run (`nnperf.study.scope`, `.job_requests`, `.session`)."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest

from nnperf.core import config as study_config
from nnperf.core import contract, devices, layout
from nnperf.core.errors import NnperfError
from nnperf.core.keys import RunKey
from nnperf.study import job_requests, session
from nnperf.study.scope import scope_of
from nnperf.study.selection import Selection, check_selected_variants, select_stages

from conftest import REPO

KEY = RunKey("cpu", "resnet18_cifar", "fp32", 8, "baseline")


def study_of(override: dict) -> tuple[dict, contract.StudyConfig]:
    schema = study_config.load_schema(REPO / "workflow/schemas/config.schema.yaml")
    config = study_config.validate(override, schema)
    return config, contract.from_dict(contract.StudyConfig, config)


def wildcards(**values) -> SimpleNamespace:
    return SimpleNamespace(**values)


# --- the key ------------------------------------------------------------------------------


def test_a_key_from_wildcards_has_an_integer_batch_size():
    w = wildcards(
        device="cpu",
        model="resnet18_cifar",
        precision="fp32",
        batch_size="8",
        variant="baseline",
        dataset="synthetic",
    )
    assert RunKey.from_wildcards(w) == KEY
    assert study_config.RunKey is RunKey and contract.RunKey is RunKey


def test_requests_expose_their_key_and_keep_their_plain_form():
    _, study = study_of({"batch_sizes": [8]})
    run = job_requests.run_request(study, KEY, "synthetic")
    training = job_requests.training_request(study, KEY, "default", "synthetic")
    assert run.key == KEY and training.key == KEY
    plain = contract.to_dict(run)
    assert "key" not in plain and plain["batch_size"] == 8 and plain["device"] == "cpu"
    assert contract.from_dict(contract.RunRequest, plain) == run
    assert "key" not in contract.to_dict(training)


def test_layout_types_the_keys_a_path_gives():
    assert layout.typed_keys({"batch_size": "64", "device": "cpu"}) == {
        "batch_size": 64,
        "device": "cpu",
    }


# --- selections ---------------------------------------------------------------------------


def test_a_selection_of_none_takes_every_value_and_an_off_stage_nothing():
    assert Selection().selects(KEY)
    assert Selection(batch_sizes=(8,), variants=("baseline",), precisions=("fp32",)).selects(KEY)
    assert not Selection(batch_sizes=(16,)).selects(KEY)
    assert not Selection(variants=("tuned",)).selects(KEY)
    assert not Selection(precisions=("bf16",)).selects(KEY)
    assert not Selection(enabled=False).selects(KEY)


def test_stages_select_their_part_of_the_matrix():
    config, study = study_of(
        {
            "devices": ["cpu"],
            "batch_sizes": [8, 16],
            "variants": {"baseline": {}, "tuned": {"channels_last": True}},
            "operator_profile": {"batch_sizes": [16]},
            "convergence": {"variants": ["tuned"], "precisions": ["fp32"]},
        }
    )
    matrix, _ = study_config.expand_matrix(config)
    chosen = select_stages(study, matrix, ncu_on_path=True)
    assert chosen.ncu == ()  # CPU only
    assert {key.batch_size for key in chosen.operator_profile} == {16}
    assert {(key.variant, recipe) for key, recipe in chosen.training} == {("tuned", "default")}


def test_profiles_select_precisions_as_they_select_batch_sizes_and_variants():
    # One ncu profile and one operator-profile precision of a three-precision GPU matrix: the
    # fp16 path is timed without paying a profile for it.
    config, study = study_of(
        {
            "devices": ["cuda"],
            "precisions": ["fp32", "fp16", "bf16"],
            "batch_sizes": [8, 16],
            "variants": {"baseline": {}, "tuned": {"channels_last": True}},
            "ncu": {"precisions": ["bf16"], "batch_sizes": [8], "variants": ["tuned"]},
            "operator_profile": {"precisions": ["fp16"], "variants": ["baseline"]},
        }
    )
    matrix, _ = study_config.expand_matrix(config, lambda: "cuda")
    assert {key.precision for key in matrix} == {"fp32", "fp16", "bf16"}
    chosen = select_stages(study, matrix, ncu_on_path=True)
    assert chosen.ncu == (RunKey("cuda", "resnet18_cifar", "bf16", 8, "tuned"),)
    assert [(k.precision, k.batch_size, k.variant) for k in chosen.operator_profile] == [
        ("fp16", 8, "baseline"),
        ("fp16", 16, "baseline"),
    ]
    # Null (the default) takes every precision.
    _, every = study_of({"devices": ["cuda"], "precisions": ["fp32", "bf16"]})
    assert every.ncu.precisions is None and every.operator_profile.precisions is None
    assert len(select_stages(every, matrix, ncu_on_path=True).operator_profile) == len(matrix)


@pytest.mark.parametrize("section", ["ncu", "operator_profile"])
def test_a_profile_precision_filter_outside_the_vocabulary_is_one_line(section):
    with pytest.raises(NnperfError) as error:
        study_of({section: {"precisions": ["fp8"]}})
    message = str(error.value)
    assert "\n" not in message and f"{section}.precisions" in message and "fp8" in message
    assert "bf16" in message  # what is allowed


@pytest.mark.parametrize("section", ["ncu", "operator_profile", "convergence"])
def test_a_stage_naming_an_unknown_variant_is_one_line(section):
    _, study = study_of({section: {"variants": ["tunde"]}})
    with pytest.raises(NnperfError) as error:
        check_selected_variants(study)
    assert str(error.value) == (
        f"config {section}.variants names 'tunde', which is not in config variants; "
        "allowed: baseline"
    )


# --- the scope ----------------------------------------------------------------------------


def test_scope_notes_what_the_study_leaves_out():
    config, study = study_of(
        {
            "devices": ["cpu"],
            "precisions": ["fp32", "fp16"],
            "operator_profile": {"enabled": False},
            "convergence": {"enabled": False},
        }
    )
    scope = scope_of(config, study, ncu_on_path=False, detect=lambda: "cpu")
    assert scope.devices == ("cpu",) and all(key.precision == "fp32" for key in scope.matrix)
    assert scope.empty_message is None
    assert scope.messages[0].startswith("nnperf note: precision fp16 is left out on cpu")
    assert [note.split(":")[0] for note in scope.notes] == [
        "Precision fp16 is left out on cpu (it cannot run there; cpu runs",
        "Device 'cpu'",
        "Operator_profile.enabled is false",
        "Convergence.enabled is false",
    ]
    assert scope.selection.operator_profile == () and scope.selection.training == ()


def test_an_empty_scope_says_why_and_refuses_study_files():
    config, study = study_of({"devices": ["cpu"], "precisions": ["fp16"]})
    scope = scope_of(config, study, ncu_on_path=False, detect=lambda: "cpu")
    assert scope.matrix == () and scope.empty_message.startswith("nothing to measure")
    assert f"nnperf: {scope.empty_message}" in scope.messages
    with pytest.raises(NnperfError, match="nothing to measure"):
        scope.check_dataset("synthetic")


def test_scope_refuses_another_studys_dataset():
    config, study = study_of({})
    scope = scope_of(config, study, ncu_on_path=False, detect=lambda: "cpu")
    scope.check_dataset("synthetic")
    with pytest.raises(NnperfError, match="add --config dataset=cifar10 to build it"):
        scope.check_dataset("cifar10")


def test_auto_without_a_gpu_is_a_report_note_only():
    config, study = study_of({"devices": ["auto"]})
    scope = scope_of(config, study, ncu_on_path=False, detect=lambda: "cpu")
    note = "No GPU: devices 'auto' resolved to cpu on the machine that built the DAG."
    assert note in scope.notes and all(note not in line for line in scope.messages)


# --- requests -----------------------------------------------------------------------------


def test_requests_of_an_impossible_configuration_fail_in_one_line():
    _, study = study_of({})
    with pytest.raises(NnperfError, match="cannot run on device 'cpu'"):
        job_requests.run_request(
            study, RunKey("cpu", "resnet18_cifar", "fp16", 8, "baseline"), "synthetic"
        )
    with pytest.raises(NnperfError, match="variant 'tuned' is not in config variants"):
        job_requests.run_request(
            study, RunKey("cpu", "resnet18_cifar", "fp32", 8, "tuned"), "synthetic"
        )
    with pytest.raises(NnperfError, match="recipe 'fast' is not in config recipes"):
        job_requests.training_request(study, KEY, "fast", "synthetic")


def test_requests_carry_the_study_settings():
    _, study = study_of({"ncu": {"warmup_steps": 7}})
    run = job_requests.run_request(study, KEY, "synthetic")
    assert run.data_root == "resources/data/synthetic" and run.timing == study.timing
    profile = job_requests.profile_request(study, KEY, "synthetic")
    assert profile.run.training.warmup_steps == 7
    assert profile.run.training.timed_steps == study.training.timed_steps
    operators = job_requests.operator_profile_request(study, KEY, "synthetic")
    assert operators.settings == study.operator_profile
    ceilings = job_requests.ceilings_request(study, "cpu")
    assert ceilings.peaks_path == "config/peaks.yaml" and ceilings.settings == study.ceilings
    report = job_requests.report_request(study, ["A note."])
    assert report.notes == ("A note.",) and report.dataset == "synthetic"
    assert job_requests.dataset_request(study, "synthetic").root == "resources/data/synthetic"


def test_measurement_threads():
    _, study = study_of({"variants": {"baseline": {}, "loaded": {"num_workers": 3}}})
    assert job_requests.measurement_threads(study, "cpu", "loaded", 16) == 16
    assert job_requests.measurement_threads(study, "cuda", "loaded", 16) == 4
    assert job_requests.measurement_threads(study, "cuda", None, 16) == 1
    assert job_requests.measurement_threads(study, "cuda", "unknown", 16) == 1


def test_accuracy_target_is_the_shared_one():
    _, study = study_of({"recipes": {"a": {"target_accuracy": 0.8}, "b": {"target_accuracy": 0.8}}})
    assert job_requests.accuracy_target(study) == 0.8
    _, study = study_of({"recipes": {"a": {"target_accuracy": 0.8}, "b": {"target_accuracy": 0.9}}})
    assert job_requests.accuracy_target(study) is None


# --- the edges of a run -------------------------------------------------------------------


def test_the_library_goes_first_on_pythonpath():
    environ = {"PYTHONPATH": os.pathsep.join(["", "/a", "/b"])}
    joined = session.library_pythonpath("/repo/src", environ)
    assert joined == os.pathsep.join(["/repo/src", "/a", "/b"])
    assert session.library_pythonpath("/repo/src", {}) == "/repo/src"


@pytest.mark.parametrize(
    "argv, refused",
    [
        (["--report"], True),
        (["--report", "--cores", "1"], True),
        (["--report", "reports/report.html"], False),
        (["--cores", "1"], False),
    ],
)
def test_report_needs_a_path(argv, refused):
    problem = session.report_path_problem(argv)
    assert (problem is not None) == refused
    if refused:
        assert problem.startswith("give --report a path: snakemake --report reports/report.html")


def test_no_device_needed_is_no_problem():
    assert session.absent_device_problem(["cpu"], profiles_ncu=False) is None


def _snakemake_args(*argv: str):
    """The command line as `snakemake` parses it (its workflow profile included)."""
    from snakemake.cli import parse_args

    return parse_args(["--snakefile", str(REPO / "Snakefile"), *argv])[1]


@pytest.mark.parametrize(
    "argv, runs_here",
    [
        (["--cores", "2"], True),
        (["--cores", "2", "all"], True),
        (["--jobs", "3"], True),
        (["--cores", "2", "--dry-run"], False),
        (["--cores", "1", "--touch"], False),
        (["--lint"], False),
        (["--summary"], False),
        (["--report", "reports/report.html"], False),
        (["--cores", "2", "--until", "timed_group"], False),
        (["--cores", "2", "results/complexity/synthetic/resnet18_cifar.json"], False),
        # A login node submits to the cluster's nodes, which have the GPU.
        (["--executor", "slurm", "--jobs", "4"], False),
    ],
)
def test_only_a_local_run_of_the_whole_study_runs_its_jobs_here(argv, runs_here):
    assert session.runs_the_whole_study_here(_snakemake_args(*argv)) is runs_here


def test_outside_the_snakemake_command_the_invocation_is_unknown():
    """Called through Snakemake's Python API (or here), nothing stops early: onstart checks."""
    assert session.snakemake_invocation() is None
    assert session.runs_the_whole_study_here(None) is False


@pytest.mark.skipif(devices.has_cuda_driver(), reason="this machine has a GPU driver")
def test_an_absent_device_stops_a_run_that_would_measure_on_it_and_is_noted_otherwise():
    unmeasured = {"cuda": True, "cpu": True}.__getitem__
    notes, problem = session.absent_device_lines(["cpu", "cuda"], True, unmeasured)
    assert notes == []
    assert problem == f"config devices: {devices.absent_reason('cuda')}"
    assert problem.startswith("config devices: device 'cuda' is not available on this machine")
    # A dry run or a cluster submission plans it, with a note.
    notes, problem = session.absent_device_lines(["cpu", "cuda"], False, unmeasured)
    assert problem is None
    assert notes == [
        f"config devices: {devices.absent_reason('cuda')}; planned anyway: a run of its jobs "
        "here stops before the first one"
    ]
    # Its results already here (measured elsewhere): the report may be made; onstart still
    # stops a run whose jobs need the device.
    notes, problem = session.absent_device_lines(["cuda"], True, lambda device: False)
    assert problem is None and len(notes) == 1
    assert session.absent_device_lines(["cpu"], True, unmeasured) == ([], None)


def test_failure_lines_name_each_failed_job(tmp_path):
    started = time.time() - 5
    log = tmp_path / "runs" / "x.log"
    log.parent.mkdir()
    log.write_text("starting\nnnperf run: error: out of budget\n")
    lines = session.failure_lines(str(tmp_path), started)
    assert lines == [
        "nnperf: 1 failed job(s), and why:",
        f"  nnperf run: error: out of budget  [{log}]",
    ]
    assert session.failure_lines(str(tmp_path / "none"), started) == []


def test_the_nnperf_command():
    assert session.nnperf_command("/usr/bin/python3", conda=False) == "'/usr/bin/python3' -m nnperf"
    assert session.nnperf_command("/usr/bin/python3", conda=True) == "python -m nnperf"
