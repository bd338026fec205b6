"""The edges of one Snakemake run of the workflow: its environment, its command line, and
what its `onstart` and `onerror` handlers say.

`workflow/rules/common.smk` calls these and only prints or exits with what they return, so
each check is tested here as data (`tests/study/test_scope.py`) rather than through a Snakemake run.
What the study covers is `nnperf.study.scope`; the requests jobs run are
`nnperf.study.job_requests`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from nnperf.core import devices
from nnperf.core.jobs import failure_causes


def library_pythonpath(src: str, environ: Mapping[str, str]) -> str:
    """PYTHONPATH of `environ` with this checkout's library (`src`) first.

    Every result must come from the code whose git commit it records, whether or not nnperf
    is pip-installed; jobs (scripts, the ncu process) inherit it through PYTHONPATH.
    """
    rest = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join([src] + rest)


def checkout_file(
    checkout: str | os.PathLike, relative: str, workdir: str | os.PathLike = "."
) -> str:
    """nnperf's own file `relative` (e.g. config/peaks.yaml) of `checkout`, as a path from
    `workdir`, the folder Snakemake runs in: as given when that is the checkout (the paths a
    run records stay the same wherever the checkout lies), else absolute, as in a user's
    project that uses nnperf as a module."""
    if Path(workdir).resolve() == Path(checkout).resolve():
        return relative
    return str(Path(checkout).resolve() / relative)


def report_path_problem(argv: Sequence[str]) -> str | None:
    """One line when `snakemake --report` is given without a path, else None.

    Without one Snakemake writes report.html into the working directory, the repository root;
    the study's Snakemake report belongs beside its summary under reports/.
    """
    if "--report" not in argv:
        return None
    after = list(argv)[list(argv).index("--report") + 1 :]
    if not after or after[0].startswith("-"):
        return (
            "give --report a path: snakemake --report reports/report.html "
            "(without one Snakemake writes report.html into the repository root)"
        )
    return None


# Set by a caller that ran the CUDA preflight itself for every Snakemake call it makes
# (`nnperf gpu-study` runs it once, then one call per stage): what it checked, "cuda" or
# "cuda+ncu". Those calls' `onstart` then does not pay torch's import, CUDA's start-up and
# the ncu probe again (15-30 s a call on an H100 machine).
PREFLIGHT_DONE_ENV = "NNPERF_PREFLIGHT_DONE"


def preflight_done_value(profiles_ncu: bool) -> str:
    """What `PREFLIGHT_DONE_ENV` says after a CUDA preflight with (or without) ncu's probe."""
    return "cuda+ncu" if profiles_ncu else "cuda"


def preflight_was_done(profiles_ncu: bool, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the caller's preflight covered what these jobs need."""
    done = environ.get(PREFLIGHT_DONE_ENV, "")
    return done == "cuda+ncu" or (done == "cuda" and not profiles_ncu)


def absent_device_problem(
    needed: Iterable[str], profiles_ncu: bool, warn: Callable[[str], None] | None = None
) -> str | None:
    """The `onstart` check, as one line (or None): a device of `needed` (the devices of the
    jobs about to run here) that this machine lacks, before any job runs rather than a failed
    job per configuration minutes later. CUDA jobs also get `nnperf doctor`'s CUDA checks
    (torch's CUDA build, the driver, NVML; ncu and its counters when `profiles_ncu`,
    ncu_profile jobs being pending); torch is imported only then. `warn(line)` gets each
    warning, what the jobs run without (NVML: their clocks go unrecorded). A caller that ran
    the CUDA checks itself says so in `PREFLIGHT_DONE_ENV`, and they are not run again."""
    needed = list(needed)
    for device in needed:
        reason = devices.absent_reason(device)
        if reason:
            return f"config devices: {reason}"
    if "cuda" in needed and not preflight_was_done(profiles_ncu):
        from nnperf.study import preflight

        problem, warnings = preflight.cuda_preflight(profile_ncu=profiles_ncu)
        for line in warnings if warn is not None else ():
            warn(line)
        return problem
    return None


# Snakemake's flags that make a call do something other than run jobs (`snakemake.cli`'s
# branches before `execute_workflow`), or run only part of the study.
NOT_A_RUN_FLAGS = (
    "dryrun", "touch", "lint", "list_target_rules", "list_rules", "print_compilation",
    "containerize", "report", "generate_unit_tests", "dag", "rulegraph", "filegraph", "d3dag",
    "unlock", "cleanup_metadata", "conda_cleanup_envs", "conda_create_envs_only",
    "list_conda_envs", "cleanup_shadow", "container_cleanup_images", "list_changes",
    "list_input_changes", "list_params_changes", "list_untracked", "summary",
    "detailed_summary", "archive", "delete_all_output", "delete_temp_output", "until",
    "omit_from", "allowed_rules",
)  # fmt: skip


def snakemake_invocation():
    """The command line of the `snakemake` call parsing this Snakefile, its profile's values
    included (the `args` of `snakemake.cli.args_to_api`), or None when Snakemake was called
    otherwise (its Python API). The Snakefile is parsed before Snakemake picks its executor,
    and the banner follows at once; only the command line says, that early, whether jobs
    will run here."""
    import inspect

    frame = inspect.currentframe()
    while frame is not None:
        code = frame.f_code
        if code.co_name == "args_to_api" and Path(code.co_filename).parts[-2:] == (
            "snakemake",
            "cli.py",
        ):
            return frame.f_locals.get("args")
        frame = frame.f_back
    return None


def runs_the_whole_study_here(args) -> bool:
    """Whether the `snakemake` call `args` (snakemake_invocation()) runs the study's jobs on
    this machine now: no dry run or other mode, no cluster executor (a login node submits to
    nodes that have the device), no targets but `all`. False when unknown (None)."""
    if args is None or getattr(args, "executor", None) not in (None, "local"):
        return False
    if any(getattr(args, flag, None) for flag in NOT_A_RUN_FLAGS):
        return False
    return list(getattr(args, "targets", None) or ()) in ([], ["all"])


def absent_device_lines(
    needed: Iterable[str], runs_here: bool, unmeasured: Callable[[str], bool]
) -> tuple[list[str], str | None]:
    """(notes, problem) for the devices of `needed` this machine lacks, when the Snakefile is
    parsed: a call that `runs_here` (runs_the_whole_study_here) with measurements of such a
    device still to make stops with its one line before Snakemake prints anything more; any
    other call (a dry run, a cluster submission, a run whose results exist) is noted and goes
    on, and the `onstart` check (absent_device_problem) still stops a run whose jobs need it.
    The probe is cheap (driver files, no torch import), so a dry run stays fast."""
    notes = []
    for device in needed:
        reason = devices.absent_reason(device)
        if not reason:
            continue
        if runs_here and unmeasured(device):
            return [], f"config devices: {reason}"
        notes.append(
            f"config devices: {reason}; planned anyway: a run of its jobs here stops before "
            "the first one"
        )
    return notes, None


def failure_lines(log_dir: str, since: float) -> list[str]:
    """The `onerror` report: one line per failed job (a log written since `since`) with
    the cause from its log, under a heading; empty when no log says why."""
    causes = failure_causes(log_dir, since)
    if not causes:
        return []
    return [f"nnperf: {len(causes)} failed job(s), and why:"] + [
        f"  {cause}  [{log}]" for log, cause in causes
    ]


def nnperf_command(executable: str, conda: bool) -> str:
    """How a shell rule calls the nnperf CLI: `executable`, the interpreter running
    Snakemake, so a job never picks up another environment's torch from PATH; under
    `--sdm conda` the rule's own environment's python."""
    if conda:
        return "python -m nnperf"
    return f"'{executable}' -m nnperf"
