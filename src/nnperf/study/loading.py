"""A study read outside Snakemake, exactly as the workflow reads it.

`nnperf doctor` and `nnperf gpu-study` must know what a study asks for (its devices, its
`ncu.enabled`, its dataset) before Snakemake runs it, and it must be the study the workflow
will run: config/config.yaml (the Snakefile's `configfile:`), each `--configfile` merged over
it in order and then the `--config` entries (Snakemake's own `update_config` and
`parse_config`), the sections of `config.REPLACED_SECTIONS` taken whole from the last layer
naming them (`config.overlay_study`), validated with every default filled in
(`config.validate`) and typed (`contract.StudyConfig`). `workflow/rules/common.smk` does the
same inside Snakemake.

Every error is one line naming the file. It reads files only; it decides nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import yaml

from nnperf.core import contract, devices
from nnperf.core import config as study_config
from nnperf.core.errors import NnperfError

REPO = Path(__file__).resolve().parents[3]
# The Snakefile's `configfile:`, relative to the folder Snakemake runs in.
DEFAULT_CONFIG = Path("config") / "config.yaml"


@dataclass(frozen=True)
class Study:
    """A validated study: the config with defaults, its typed form, and where it came from."""

    config: dict
    typed: contract.StudyConfig
    files: tuple[str, ...]  # the --configfile files, in order (config/config.yaml not named)
    devices: tuple[str, ...]  # `auto` resolved on this machine

    @property
    def name(self) -> str:
        """How messages name it: its --configfile files, or the default config."""
        return ", ".join(self.files) or str(DEFAULT_CONFIG)

    def run_requests(self) -> list[contract.RunRequest]:
        """The `contract.RunRequest` of every configuration of the matrix, as rule
        `timed_run` asks for them (the dataset prepared where rule `prepare_dataset` puts
        it), with `auto` resolved to this study's devices."""
        from nnperf.study.job_requests import run_request

        matrix, _ = study_config.expand_matrix(
            {**self.config, "devices": list(self.devices)}, detect=lambda: self.devices[0]
        )
        dataset = self.typed.dataset.key
        return [run_request(self.typed, key, dataset) for key in matrix]


def default_config(workdir: str | Path = ".") -> Path:
    """config/config.yaml of the folder Snakemake runs in, else this checkout's."""
    local = Path(workdir) / DEFAULT_CONFIG
    return local if local.exists() else REPO / DEFAULT_CONFIG


def module_study(given: dict, checkout: str | Path = REPO) -> dict:
    """The study of a user's project that uses nnperf as a Snakemake module (`config:
    config`): the user's config (`given`) merged over `checkout`'s config/config.yaml as a
    `--configfile` would be (Snakemake's `update_config`), so a key the user leaves out has
    the default study's value. Inside a module Snakemake skips the Snakefile's `configfile:`,
    which would have read the user's folder's config/config.yaml instead."""
    import copy

    from snakemake.utils import update_config

    config = read_config_file(Path(checkout) / DEFAULT_CONFIG)
    update_config(config, copy.deepcopy(given))
    return config


def read_config_file(path: str | Path) -> dict:
    """One study file as a mapping, or NnperfError in one line naming it."""
    from snakemake.common.configfile import load_configfile
    from snakemake.exceptions import WorkflowError

    if not Path(path).is_file():
        raise NnperfError(f"config file {str(path)!r} does not exist")
    try:
        return load_configfile(str(path))
    except (WorkflowError, OSError) as error:
        raise NnperfError(f"config file {str(path)!r} {_why_unreadable(path, error)}") from None


def default_config_problem(
    given_configfiles: Sequence[str | Path] = (), workdir: str | Path = "."
) -> str | None:
    """What is wrong with the Snakefile's `configfile:` (config/config.yaml of `workdir`),
    in one line, or None: the Snakefile asks before Snakemake reads it, whose own messages
    are two lines naming the Snakefile, and for a YAML error neither file, line nor column.

    A missing file is fine when `--configfile` files were given (Snakemake then skips it and
    the study is theirs on top of the schema's defaults). The `--configfile` files themselves
    are read by Snakemake's command line before any workflow code runs (its
    `ConfigSettings`), so they cannot be checked from here; `nnperf plan` checks them.
    """
    path = Path(workdir) / DEFAULT_CONFIG
    if not path.exists():
        if given_configfiles:
            return None
        return (
            f"config file {str(DEFAULT_CONFIG)!r} does not exist in {Path(workdir).resolve()}; "
            "run Snakemake from the nnperf checkout (or its --directory), or give a study "
            "with --configfile"
        )
    try:
        read_config_file(path)
    except NnperfError as error:
        return str(error)
    return None


def _why_unreadable(path: str | Path, error: Exception) -> str:
    """Where YAML stopped reading (Snakemake's message does not say), else its message."""
    try:
        yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as yaml_error:
        mark = getattr(yaml_error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(yaml_error, "problem", None) or "cannot be parsed"
        return f"is not valid YAML{where}: {problem}"
    except (OSError, UnicodeDecodeError) as read_error:
        return f"cannot be read: {read_error}"
    lines = str(error).strip().splitlines()
    return f"cannot be read: {lines[0] if lines else type(error).__name__}"


def parse_config_entries(entries: Sequence[str]) -> dict:
    """`--config` entries (`key=value`) parsed as Snakemake parses them."""
    if not entries:
        return {}
    from snakemake.cli import parse_config

    try:
        return parse_config(list(entries))
    except ValueError as error:
        raise NnperfError(f"--config {' '.join(entries)}: {error}")


def load_study(
    configfiles: Sequence[str | Path] = (),
    config_entries: Sequence[str] = (),
    base: str | Path | None = None,
    schema_path: str | Path = study_config.SCHEMA_PATH,
    detect: Callable[[], str] = devices.detect_best_device,
) -> Study:
    """The study of `configfiles` and `config_entries` on top of `base` (default_config())."""
    from snakemake.utils import update_config

    base = Path(base) if base is not None else default_config()
    config = read_config_file(base)
    layers = [read_config_file(path) for path in configfiles]
    layers.append(parse_config_entries(config_entries))
    for layer in layers:
        update_config(config, layer)
    files = tuple(str(path) for path in configfiles)
    where = ", ".join(files) or str(base)
    try:
        validated = study_config.validate(
            study_config.overlay_study(config, layers), study_config.load_schema(schema_path)
        )
        typed = contract.from_dict(contract.StudyConfig, validated)
    except NnperfError as error:
        raise NnperfError(f"{where}: {error}") from None
    return Study(
        config=validated,
        typed=typed,
        files=files,
        devices=tuple(study_config.resolved_devices(validated, detect)),
    )
