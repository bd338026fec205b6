"""Running Nsight Compute on this machine: a training step profiled into a report and its
meta, and a report exported to the raw-page CSV.

`nnperf.ncu.metrics` knows what to collect and how the command lines look, `nnperf.ncu.raw_csv`
how to read the export; this module is the process edge around them (`nnperf ncu-command`,
rules `ncu_profile` and `ncu_export`). It finds the `ncu` executable and the GPU's architecture,
runs the commands, checks what they wrote, and records how a profile was taken in its meta
(`.ncu.json`): the command line, the settings, the ncu version, the wall time, and, when the
target is the step of a `ProfileStepRequest`, that request and its configuration keys, which is
where `nnperf.ncu.kernels` reads them from (nothing parses them out of a path).
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from nnperf.core.contract import NcuSettings, ProfileStepRequest, to_dict
from nnperf.core.errors import NnperfError
from nnperf.core.files import atomic_path, write_json
from nnperf.core.vocab import CONFIG_KEYS
from nnperf.ncu import metrics
from nnperf.ncu import ranges, raw_csv

META_KIND = "ncu_profile"
# The executable name; a bare name is also looked for where Nsight Compute installs (find_ncu).
DEFAULT_NCU = "ncu"


@dataclass(frozen=True)
class NcuOptions:
    """How `ncu` profiles (the flags of `nnperf ncu-command profile`)."""

    # auto: ask nvidia-smi, then torch, for the compute capability of the first visible GPU.
    arch: str = "auto"
    clock_control: str = NcuSettings.clock_control
    replay_mode: str = metrics.REPLAY_MODES[0]
    cache_control: str = metrics.CACHE_CONTROLS[0]
    ncu: str = DEFAULT_NCU


def step_target(request_path: str | os.PathLike) -> list[str]:
    """The process profiled for a request: `nnperf step --request FILE` under this very
    interpreter, so it sees the same nnperf and torch as the command that starts it."""
    return [sys.executable, "-m", "nnperf", "step", "--request", str(request_path)]


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path))


def find_ncu(
    executable: str = DEFAULT_NCU, search: Sequence[str] = metrics.NCU_SEARCH
) -> str | None:
    """The `ncu` to run: `executable` on PATH (or as a path); for the bare default name also
    the folders of `ncu.NCU_SEARCH`, the newest version first. None when there is none.

    The workflow decides with this whether `ncu.enabled: auto` profiles, and the jobs run what
    it finds, so both agree on one executable.
    """
    found = shutil.which(executable)
    if found or executable != DEFAULT_NCU:
        return found
    for pattern in search:
        for candidate in sorted(glob.glob(pattern), key=_version_key, reverse=True):
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    return None


def require_ncu(executable: str) -> str:
    found = find_ncu(executable)
    if found is None:
        where = metrics.searched_places() if executable == DEFAULT_NCU else "PATH"
        raise NnperfError(
            f"ncu executable {executable!r} not found on {where}; install Nsight Compute (CUDA "
            "toolkit) or set ncu.enabled: false in the config"
        )
    return found


def detect_compute_capability() -> str:
    """Compute capability of the first visible GPU: nvidia-smi, else torch."""
    # core.environment imports torch: only `--arch auto` pays for it.
    from nnperf.core.environment import nvidia_smi_rows

    capabilities = [row["compute_cap"] for row in nvidia_smi_rows(("compute_cap",))]
    capabilities = [c for c in capabilities if c]
    if capabilities:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        index = int(visible) if visible.isdigit() and int(visible) < len(capabilities) else 0
        return capabilities[index]
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"{major}.{minor}"
    except ImportError:
        pass
    raise NnperfError(
        "--arch auto: no GPU found (neither nvidia-smi nor torch reports one); "
        f"pass --arch with one of {', '.join(metrics.ARCHITECTURES)}"
    )


def ncu_version(executable: str) -> str:
    result = subprocess.run([executable, "--version"], capture_output=True, text=True, check=False)
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    return lines[-1] if lines else "unknown"


def profile_to_files(
    target: Sequence[str],
    report: str | os.PathLike,
    meta: str | os.PathLike | None = None,
    options: NcuOptions = NcuOptions(),
    request: ProfileStepRequest | None = None,
    dry_run: bool = False,
) -> list[str]:
    """Profile `target` under ncu into `report` (.ncu-rep) and write its meta; returns the
    ncu command line. With `dry_run` nothing runs and nothing is written.

    `meta` defaults to the report path with `.ncu.json`. `request`, when the target is its
    step, puts the request and its configuration keys into the meta.
    """
    if not str(report).endswith(".ncu-rep"):
        raise NnperfError(f"--report {str(report)!r} must end in .ncu-rep")
    executable = options.ncu if dry_run else require_ncu(options.ncu)
    capability = detect_compute_capability() if options.arch == "auto" else options.arch
    mset = metrics.metric_set(metrics.metric_set(capability).arch)
    argv = metrics.profile_command(
        list(target),
        report,
        mset.metrics(),
        ncu=executable,
        clock_control=options.clock_control,
        replay_mode=options.replay_mode,
        cache_control=options.cache_control,
    )
    if dry_run:
        return argv
    Path(report).parent.mkdir(parents=True, exist_ok=True)
    print(f"nnperf ncu-command: {shlex.join(argv)}", file=sys.stderr, flush=True)
    started = time.time()
    wall_start = time.perf_counter()
    completed = subprocess.run(argv, check=False)
    wall_time_s = time.perf_counter() - wall_start
    if completed.returncode != 0:
        raise NnperfError(
            f"ncu exited with status {completed.returncode} profiling: {shlex.join(target)}"
        )
    if not Path(report).exists():
        raise NnperfError(
            f"{report}: ncu wrote no report; no kernel matched the NVTX ranges "
            f"{ranges.STEP_RANGE!r}/{ranges.CALIBRATION_RANGE!r}"
        )
    keys = {key: getattr(request.run, key) for key in CONFIG_KEYS} if request else {}
    document = {
        "kind": META_KIND,
        **keys,
        "request": to_dict(request) if request else None,
        "report": str(report),
        "command": argv,
        "target": list(target),
        "arch": mset.arch,
        "metrics": mset.metrics(),
        "clock_control": options.clock_control,
        "replay_mode": options.replay_mode,
        "cache_control": options.cache_control,
        "nvtx_include": ranges.nvtx_include_filters(),
        "ncu_version": ncu_version(argv[0]),
        "started_at_unix": started,
        "wall_time_s": wall_time_s,
    }
    write_json(meta or metrics.report_stem(report) + ".ncu.json", document)
    return argv


def export_to_csv(
    report: str | os.PathLike,
    csv: str | os.PathLike,
    executable: str = NcuOptions.ncu,
    dry_run: bool = False,
) -> list[str]:
    """Write the raw-page CSV export of `report` to `csv`, after checking that it parses;
    returns the ncu command line. With `dry_run` nothing runs."""
    argv = metrics.export_command(report, ncu=executable)
    if dry_run:
        return argv
    argv[0] = require_ncu(executable)
    if not Path(report).exists():
        raise NnperfError(f"{report}: report not found")
    # The C locale keeps "," as the thousands separator the parser expects.
    env = {**os.environ, "LC_ALL": "C"}
    completed = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    sys.stderr.write(completed.stderr)
    if completed.returncode != 0:
        last = (completed.stderr.strip().splitlines() or ["no message"])[-1]
        raise NnperfError(
            f"ncu --import {report} exited with status {completed.returncode}: {last}"
        )
    raw_csv.parse_raw_csv(completed.stdout, source=f"{report} (export)")
    with atomic_path(csv) as tmp:
        tmp.write_text(completed.stdout, encoding="utf-8")
    return argv
