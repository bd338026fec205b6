"""`nnperf roofline-points`: every roofline point, from ncu kernels and analytic estimates.

Writes `results/tables/roofline_points.csv` (per-kernel and per-step ncu points at DRAM, L2 and
L1; one analytic step point per timed config) and, with `--flops-table`, the per-config table
of ncu vs analytic FLOPs next to the calibration GEMM's measured/expected ratio.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from nnperf import ncu, roofline
from nnperf.errors import NnperfError
from nnperf.files import read_json, write_csv
from nnperf.kernels import KERNEL_COLUMNS


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "roofline-points",
        help="merge ncu and analytic roofline points into one table",
        description=__doc__,
    )
    parser.add_argument(
        "--kernels",
        type=Path,
        default=None,
        help="kernels table from ncu-kernels (optional: no ncu points without it)",
    )
    parser.add_argument(
        "--runs",
        nargs="*",
        type=Path,
        default=[],
        help="run JSONs (rep*.json) whose median step times give analytic points",
    )
    parser.add_argument(
        "--summary",
        type=Path,
        default=None,
        help="summary.csv of the timed runs; its step_time_s_median gives the "
        "analytic points (alternative to --runs)",
    )
    parser.add_argument(
        "--complexity",
        nargs="*",
        type=Path,
        default=[],
        help="complexity JSONs (results/complexity/{model}.json)",
    )
    parser.add_argument(
        "--output",
        required=True,
        type=Path,
        help="points table to write (results/tables/roofline_points.csv)",
    )
    parser.add_argument(
        "--flops-table",
        type=Path,
        default=None,
        help="also write ncu vs analytic FLOPs and the calibration ratio per config",
    )
    m, n, k = ncu.CALIBRATION_GEMM_MNK
    parser.add_argument(
        "--calibration-m", type=int, default=m, help=f"calibration GEMM M (default {m})"
    )
    parser.add_argument(
        "--calibration-n", type=int, default=n, help=f"calibration GEMM N (default {n})"
    )
    parser.add_argument(
        "--calibration-k", type=int, default=k, help=f"calibration GEMM K (default {k})"
    )
    parser.add_argument(
        "--calibration-launches",
        type=int,
        default=1,
        help="GEMM launches inside the calibration range (default 1)",
    )
    parser.set_defaults(func=run)


KERNEL_TEXT_COLUMNS = (
    "device",
    "model",
    "precision",
    "variant",
    "kernel_name",
    "kind",
    "phase",
    "arch",
    "cc",
    "clock_control",
)


def read_kernels(path: Path | None) -> pd.DataFrame:
    if path is None:
        return pd.DataFrame(columns=list(KERNEL_COLUMNS))
    try:
        frame = pd.read_csv(path, dtype={c: str for c in KERNEL_TEXT_COLUMNS})
    except FileNotFoundError:
        raise NnperfError(f"{path}: file not found") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise NnperfError(f"{path}: not a kernels table ({type(exc).__name__})") from None
    missing = [c for c in KERNEL_COLUMNS if c not in frame.columns]
    if missing:
        raise NnperfError(f"{path}: kernels table lacks columns {', '.join(missing)}")
    return frame


def summary_as_runs(path: Path) -> list[dict]:
    """Rows of summary.csv with a median step time, in the shape `median_step_times` reads."""
    try:
        frame = pd.read_csv(
            path, dtype={"device": str, "model": str, "precision": str, "variant": str}
        )
    except FileNotFoundError:
        raise NnperfError(f"{path}: file not found") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise NnperfError(f"{path}: not a summary table ({type(exc).__name__})") from None
    needed = ["device", "model", "precision", "batch_size", "variant", "step_time_s_median"]
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise NnperfError(f"{path}: summary table lacks columns {', '.join(missing)}")
    runs = []
    for row in frame.dropna(subset=["step_time_s_median"]).itertuples(index=False):
        runs.append(
            {
                "status": "ok",
                "device": row.device,
                "model": row.model,
                "precision": row.precision,
                "batch_size": int(row.batch_size),
                "variant": row.variant,
                "step_time_s": {"median": float(row.step_time_s_median)},
            }
        )
    return runs


def read_complexities(paths: list[Path]) -> dict[str, dict]:
    documents = {}
    for path in paths:
        document = read_json(path)
        if "model" not in document:
            raise NnperfError(f"{path}: complexity JSON has no 'model' key")
        documents[document["model"]] = document
    return documents


def run(args) -> int:
    for name in ("calibration_m", "calibration_n", "calibration_k", "calibration_launches"):
        if getattr(args, name) <= 0:
            raise NnperfError(f"--{name.replace('_', '-')} {getattr(args, name)} must be positive")
    kernels = read_kernels(args.kernels)
    runs = [read_json(path) for path in args.runs]
    if args.summary is not None:
        runs += summary_as_runs(args.summary)
    complexities = read_complexities(args.complexity)
    parts = [roofline.ncu_points(kernels), roofline.analytic_points(complexities, runs)]
    parts = [p for p in parts if not p.empty]
    points = (
        pd.concat(parts, ignore_index=True)
        if parts
        else pd.DataFrame(columns=list(roofline.POINT_COLUMNS))
    )
    write_csv(args.output, points)
    if args.flops_table is not None:
        calibration = (
            roofline.calibration_table(
                kernels,
                (args.calibration_m, args.calibration_n, args.calibration_k),
                launches=args.calibration_launches,
            )
            if not kernels.empty
            else None
        )
        write_csv(args.flops_table, roofline.flops_comparison(points, calibration))
    return 0
