"""The `nnperf` command: every verb is listed, and a job loads only its own verb."""

from __future__ import annotations

import subprocess
import sys

from nnperf import cli
from conftest import snakemake_env


def test_top_level_help_lists_every_verb(capsys):
    try:
        cli.main(["--help"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    for module in cli.COMMAND_MODULES:
        assert module.replace("_", "-") in out


def test_a_light_verb_does_not_import_torch_or_seaborn():
    code = (
        "import sys\n"
        "from nnperf.cli import main\n"
        "try:\n"
        "    main(['ncu-kernels', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in ('torch', 'seaborn', 'torchvision') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=snakemake_env(), timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_unknown_verb_is_a_usage_error():
    result = subprocess.run(
        [sys.executable, "-m", "nnperf", "frobnicate"],
        capture_output=True, text=True, env=snakemake_env(), timeout=120,
    )
    assert result.returncode == 2
    assert "invalid choice: 'frobnicate'" in result.stderr


def test_study_verbs_take_configfile_and_config_as_snakemake_does():
    """doctor, gpu-study and plan share one pair of flags: repeatable, several values each,
    every value kept in order."""
    argv = ["--configfile", "a.yaml", "--configfile", "b.yaml", "c.yaml"]
    argv += ["--config", "x=1", "--config", "y=2", "z=3"]
    for verb, extra in (("doctor", []), ("plan", []), ("gpu-study", ["--dest", "out"])):
        args = cli.build_parser([verb]).parse_args([verb, *argv, *extra])
        assert args.configfile == ["a.yaml", "b.yaml", "c.yaml"], verb
        assert args.config == ["x=1", "y=2", "z=3"], verb
