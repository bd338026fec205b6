"""Numbers that can only be mistakes are refused with one line naming the key: NaN and
infinities anywhere (the loader, the settings dataclasses and a real `snakemake -n`), a
`cpu_threads` above this machine's cores, and fractions above their bound."""

from __future__ import annotations

import math
import os

import pytest

from nnperf.core import config as study_config
from nnperf.core import contract
from nnperf.core.errors import NnperfError
from nnperf.study.loading import load_study

from conftest import run_snakemake


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"timing": {"max_seconds": ".nan"}}, "config timing.max_seconds = .nan "),
        ({"timing": {"max_seconds": math.inf}}, "config timing.max_seconds = .inf "),
        ({"timing": {"target_ci": ".nan"}}, "config timing.target_ci = .nan "),
        ({"report": {"cv_threshold": ".nan"}}, "config report.cv_threshold = .nan "),
        ({"training": {"lr": "-.inf"}}, "config training.lr = -.inf "),
        ({"operator_profile": {"max_seconds": "1.0e+400"}}, "config operator_profile.max_seconds = .inf "),
        ({"recipes": {"default": {"warmup_epochs": math.nan}}}, "config recipes.default.warmup_epochs = .nan "),
    ],
)
def test_the_loader_refuses_non_finite_numbers_naming_the_key(config, expected):
    """Strings are what `--config 'timing={max_seconds: .nan}'` hands over (Snakemake parses a
    mapping's values as strings); floats what a YAML file gives. `1.0e+400` overflows to inf."""
    with pytest.raises(NnperfError) as info:
        study_config.validate(config)
    message = str(info.value)
    assert message.startswith(expected), message
    assert message.endswith("is not a finite number; allowed: a finite number (or null where the key takes null)")
    assert "\n" not in message


def test_a_study_file_with_nan_is_refused_naming_the_file(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text("timing:\n  max_seconds: .nan\n", encoding="utf-8")
    with pytest.raises(NnperfError) as info:
        load_study([study], detect=lambda: "cpu")
    assert str(info.value) == (
        f"{study}: config timing.max_seconds = .nan is not a finite number; allowed: a finite "
        "number (or null where the key takes null)"
    )


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda: contract.TimingSettings(max_seconds=math.nan), "timing.max_seconds = nan is not a finite number"),
        (lambda: contract.TimingSettings(min_seconds=-math.inf), "timing.min_seconds = -inf is not a finite number"),
        (lambda: contract.TrainingSettings(lr=math.inf), "training.lr = inf is not a finite number"),
        (lambda: contract.TrainingSettings(momentum=1.0), "training.momentum = 1.0 is not allowed; allowed: a number in [0, 1)"),
        (lambda: contract.OperatorProfileSettings(max_seconds=math.nan), "operator_profile.max_seconds = nan is not a finite number"),
        (lambda: contract.ConvergenceSettings(max_seconds=math.inf), "recipe setting max_seconds = inf is not allowed; allowed: a finite number"),
        (lambda: contract.ReportSettings(cv_threshold=math.nan), "report.cv_threshold = nan is not allowed; allowed: a fraction in (0, 1]"),
        (lambda: contract.TablesRequest(cv_threshold=2.0), "report.cv_threshold = 2.0 is not allowed"),
        (lambda: contract.ReportRequest(cv_threshold=math.inf), "report.cv_threshold = inf is not allowed"),
    ],
)
def test_settings_built_outside_snakemake_refuse_non_finite_numbers(build, expected):
    """A request built by `nnperf run` or read from a JSON file never meets the loader."""
    with pytest.raises(NnperfError) as info:
        build()
    assert str(info.value).startswith(expected), str(info.value)


def test_a_request_read_from_plain_data_refuses_nan():
    """The form a job receives (Snakemake params, an ncu process's JSON file)."""
    data = contract.to_dict(contract.RunRequest(device="cpu", model="resnet18_cifar", precision="fp32", batch_size=8))
    data["timing"]["max_seconds"] = math.nan
    with pytest.raises(NnperfError, match=r"timing\.max_seconds = nan is not a finite number"):
        contract.from_dict(contract.RunRequest, data)


def test_cpu_threads_above_the_machine_s_cores_is_refused():
    config = {"variants": {"baseline": {}, "threads": {"cpu_threads": 100000}}}
    with pytest.raises(NnperfError) as info:
        study_config.validate(config, machine_cores=16)
    assert str(info.value) == (
        "config variants.threads.cpu_threads = 100000 is more than the 16 CPU cores of this "
        "machine; allowed: 1 to 16, or null for torch's default"
    )
    # At the bound it is fine, and the default bound is this machine's count.
    assert study_config.validate({"variants": {"baseline": {"cpu_threads": 16}}}, machine_cores=16)
    assert study_config.cpu_cores() == os.cpu_count()


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"report": {"cv_threshold": 5}}, "config report.cv_threshold = 5 is too large; it must be <= 1"),
        ({"training": {"momentum": 1.0}}, "config training.momentum = 1.0 is too large; it must be < 1"),
        ({"timing": {"target_ci": 1}}, "config timing.target_ci = 1 is too large; it must be < 1"),
        ({"recipes": {"default": {"target_accuracy": 90}}}, "config recipes.default.target_accuracy = 90 is too large; it must be <= 1"),
    ],
)
def test_fractions_above_their_bound_are_refused(config, expected):
    with pytest.raises(NnperfError) as info:
        study_config.validate(config)
    assert str(info.value) == expected


@pytest.mark.workflow
@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("timing={max_seconds: .nan}", "nnperf: config timing.max_seconds = .nan is not a finite number"),
        ("timing={max_seconds: .inf}", "nnperf: config timing.max_seconds = .inf is not a finite number"),
        ("report={cv_threshold: .nan}", "nnperf: config report.cv_threshold = .nan is not a finite number"),
        ("variants={baseline: {cpu_threads: 100000}}", "nnperf: config variants.baseline.cpu_threads = 100000 is more than the"),
    ],
)
def test_snakemake_stops_on_absurd_numbers_before_any_job(workdir, override, expected):
    """A real dry run: one line, a non-zero exit, nothing written, no traceback."""
    result = run_snakemake(workdir, "-n", "--config", override)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("nnperf:")]
    assert len(lines) == 1 and lines[0].startswith(expected), result.stderr
    assert "Traceback" not in result.stderr
    assert not (workdir / "results").exists()
