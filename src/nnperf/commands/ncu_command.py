"""`nnperf ncu-command {profile,export}`: run Nsight Compute the way the roofline needs.

`profile` runs a command (normally `nnperf step ...`) under `ncu` with the metric set of the
GPU's architecture, NVTX-filtered to the marked step and calibration GEMM, and writes the
`.ncu-rep` plus a sidecar `<report>.ncu.json` recording the exact command line, the settings,
the ncu version and the wall time of the profiling job. `export` writes the raw-page CSV of a
report and checks that it parses. With `--dry-run` both print the command and run nothing.
This is what the `ncu_profile` / `ncu_export` rules call.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from nnperf import ncu
from nnperf.errors import NnperfError
from nnperf.files import atomic_path, write_json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "ncu-command",
        help="profile a training step under Nsight Compute, or export a report to CSV",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    modes = parser.add_subparsers(dest="mode", metavar="MODE", required=True)

    profile = modes.add_parser(
        "profile",
        help="run a command under ncu (everything after '--' is the command)",
        description="Run a command under ncu; everything after '--' is the command.",
    )
    profile.add_argument(
        "--report",
        required=True,
        type=Path,
        help="output report path, ending in .ncu-rep (kept for the Nsight Compute UI)",
    )
    profile.add_argument(
        "--arch",
        default="auto",
        help="metric set: auto (ask nvidia-smi, then torch, for the compute "
        f"capability), one of {', '.join(ncu.ARCHITECTURES)}, or a "
        "compute capability such as 9.0 (default: auto)",
    )
    profile.add_argument(
        "--clock-control",
        default="base",
        choices=ncu.CLOCK_CONTROLS,
        help="ncu --clock-control: base locks clocks to base (repeatable "
        "counters), none leaves boost on; recorded (default: base)",
    )
    profile.add_argument(
        "--replay-mode",
        default="kernel",
        choices=ncu.REPLAY_MODES,
        help="ncu --replay-mode (default: kernel)",
    )
    profile.add_argument(
        "--cache-control",
        default="all",
        choices=ncu.CACHE_CONTROLS,
        help="ncu --cache-control: all flushes caches between replay passes " "(default: all)",
    )
    profile.add_argument("--ncu", default="ncu", help="ncu executable (default: ncu on PATH)")
    profile.add_argument(
        "--meta",
        type=Path,
        default=None,
        help="sidecar JSON (default: the report path with .ncu.json)",
    )
    profile.add_argument(
        "--dry-run",
        action="store_true",
        help="print the ncu command line and exit without running it",
    )
    profile.add_argument(
        "--nnperf-step",
        action="store_true",
        help="the target is `nnperf step` run by this same interpreter (so it "
        "sees the same nnperf and torch); the words after '--' are its flags",
    )
    profile.add_argument(
        "target",
        nargs=argparse.REMAINDER,
        help="the command to profile, after '--' (e.g. nnperf step ...)",
    )

    export = modes.add_parser("export", help="write the raw-page CSV of a report")
    export.add_argument("--report", required=True, type=Path, help="input .ncu-rep")
    export.add_argument("--csv", required=True, type=Path, help="output CSV (raw page)")
    export.add_argument("--ncu", default="ncu", help="ncu executable (default: ncu on PATH)")
    export.add_argument(
        "--dry-run",
        action="store_true",
        help="print the ncu command line and exit without running it",
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    return run_profile(args) if args.mode == "profile" else run_export(args)


def _require_ncu(executable: str) -> str:
    found = shutil.which(executable)
    if found is None:
        raise NnperfError(
            f"ncu executable {executable!r} not found on PATH; install Nsight Compute (CUDA "
            "toolkit) or set ncu.enabled: false in the config"
        )
    return found


def detect_compute_capability() -> str:
    """Compute capability of the first visible GPU: nvidia-smi, else torch."""
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        result = subprocess.run(
            [smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
        lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        if result.returncode == 0 and lines:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
            index = int(visible) if visible.isdigit() and int(visible) < len(lines) else 0
            return lines[index]
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"{major}.{minor}"
    except ImportError:
        pass
    raise NnperfError(
        "--arch auto: no GPU found (neither nvidia-smi nor torch reports one); "
        f"pass --arch with one of {', '.join(ncu.ARCHITECTURES)}"
    )


def _ncu_version(executable: str) -> str:
    result = subprocess.run([executable, "--version"], capture_output=True, text=True, check=False)
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    return lines[-1] if lines else "unknown"


def run_profile(args) -> int:
    target = list(args.target)
    if target and target[0] == "--":
        target = target[1:]
    if args.nnperf_step:
        target = [sys.executable, "-m", "nnperf", "step", *target]
    if not str(args.report).endswith(".ncu-rep"):
        raise NnperfError(f"--report {str(args.report)!r} must end in .ncu-rep")
    executable = args.ncu if args.dry_run else _require_ncu(args.ncu)
    arch = ncu.metric_set(detect_compute_capability() if args.arch == "auto" else args.arch).arch
    mset = ncu.metric_set(arch)
    argv = ncu.profile_command(
        target,
        args.report,
        mset.metrics(),
        ncu=executable,
        clock_control=args.clock_control,
        replay_mode=args.replay_mode,
        cache_control=args.cache_control,
    )
    if args.dry_run:
        print(shlex.join(argv))
        return 0
    args.report.parent.mkdir(parents=True, exist_ok=True)
    print(f"nnperf ncu-command: {shlex.join(argv)}", file=sys.stderr, flush=True)
    started = time.time()
    wall_start = time.perf_counter()
    completed = subprocess.run(argv, check=False)
    wall_time_s = time.perf_counter() - wall_start
    if completed.returncode != 0:
        raise NnperfError(
            f"ncu exited with status {completed.returncode} profiling: {shlex.join(target)}"
        )
    if not args.report.exists():
        raise NnperfError(
            f"{args.report}: ncu wrote no report; no kernel matched the NVTX ranges "
            f"{ncu.STEP_RANGE!r}/{ncu.CALIBRATION_RANGE!r}"
        )
    meta_path = args.meta or Path(ncu.report_stem(args.report) + ".ncu.json")
    write_json(
        meta_path,
        {
            "report": str(args.report),
            "command": argv,
            "target": target,
            "arch": arch,
            "metrics": mset.metrics(),
            "clock_control": args.clock_control,
            "replay_mode": args.replay_mode,
            "cache_control": args.cache_control,
            "nvtx_include": ncu.nvtx_include_filters(),
            "ncu_version": _ncu_version(argv[0]),
            "started_at_unix": started,
            "wall_time_s": wall_time_s,
        },
    )
    return 0


def run_export(args) -> int:
    argv = ncu.export_command(args.report, ncu=args.ncu)
    if args.dry_run:
        print(shlex.join(argv))
        return 0
    argv[0] = _require_ncu(args.ncu)
    if not args.report.exists():
        raise NnperfError(f"{args.report}: report not found")
    # The C locale keeps "," as the thousands separator the parser expects.
    env = {**os.environ, "LC_ALL": "C"}
    completed = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    sys.stderr.write(completed.stderr)
    if completed.returncode != 0:
        last = (completed.stderr.strip().splitlines() or ["no message"])[-1]
        raise NnperfError(
            f"ncu --import {args.report} exited with status {completed.returncode}: {last}"
        )
    ncu.parse_raw_csv(completed.stdout, source=f"{args.report} (export)")
    with atomic_path(args.csv) as tmp:
        tmp.write_text(completed.stdout, encoding="utf-8")
    return 0
