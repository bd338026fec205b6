"""`nnperf plot-roofline`: roofline figures from `roofline_points.csv`.

`--kind config`: the hierarchical roofline of one config (every kernel at DRAM/L2/L1, the step,
the analytic step), with the profile's own ceilings (from `--kernels`) and the measured and
datasheet roofs of `--ceilings`. `--kind device`: the step-level roofline of every config on
`--device`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from nnperf import roofline
from nnperf.commands.roofline_points import read_kernels
from nnperf.errors import NnperfError
from nnperf.files import atomic_path, read_json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "plot-roofline",
        help="draw a per-config hierarchical roofline or a per-device step roofline",
        description=__doc__,
    )
    parser.add_argument(
        "--kind",
        choices=("config", "device"),
        default="config",
        help="config: one config's kernels and steps; device: every config's "
        "step on --device (default: config)",
    )
    parser.add_argument("--points", required=True, type=Path, help="roofline_points.csv")
    parser.add_argument(
        "--kernels",
        type=Path,
        default=None,
        help="kernels.csv, for the profile's own ceilings (optional)",
    )
    parser.add_argument(
        "--ceilings",
        type=Path,
        default=None,
        help="ceilings JSON of the device (results/ceilings/{device}.json, optional)",
    )
    parser.add_argument("--device", required=True, help="device key (cpu, cuda, mps)")
    parser.add_argument("--model", help="model (--kind config)")
    parser.add_argument("--precision", help="precision (--kind config)")
    parser.add_argument("--batch-size", type=int, help="batch size (--kind config)")
    parser.add_argument("--variant", help="variant (--kind config)")
    parser.add_argument("--output", required=True, type=Path, help="PNG to write")
    parser.set_defaults(func=run)


TEXT_COLUMNS = (
    "device",
    "model",
    "precision",
    "variant",
    "source",
    "granularity",
    "kernel_name",
    "kind",
    "memory_level",
)


def read_points(path: Path) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path, dtype={c: str for c in TEXT_COLUMNS})
    except FileNotFoundError:
        raise NnperfError(f"{path}: file not found") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise NnperfError(f"{path}: not a roofline points table ({type(exc).__name__})") from None
    missing = [c for c in roofline.POINT_COLUMNS if c not in frame.columns]
    if missing:
        raise NnperfError(f"{path}: points table lacks columns {', '.join(missing)}")
    for column in TEXT_COLUMNS:
        frame[column] = frame[column].fillna("")
    return frame


def _select(frame: pd.DataFrame, config: dict) -> pd.DataFrame:
    mask = pd.Series(True, index=frame.index)
    for key, value in config.items():
        mask &= frame[key].astype(str) == str(value)
    return frame[mask]


def run(args) -> int:
    # Imported here: matplotlib/seaborn cost a second, and every `nnperf` verb builds the parser.
    import matplotlib.pyplot as plt

    from nnperf.plots.roofline import plot_config_roofline, plot_device_steps

    points = read_points(args.points)
    kernels = read_kernels(args.kernels) if args.kernels is not None else None
    document = read_json(args.ceilings) if args.ceilings is not None else {}
    if args.kind == "config":
        config = {
            "device": args.device,
            "model": args.model,
            "precision": args.precision,
            "batch_size": args.batch_size,
            "variant": args.variant,
        }
        absent = [f"--{k.replace('_', '-')}" for k, v in config.items() if v is None]
        if absent:
            raise NnperfError(f"--kind config needs {', '.join(absent)}")
        selected = _select(points, config)
        # An out-of-memory config has no point; that is a result, drawn as an empty roofline.
        config_kernels = _select(kernels, config) if kernels is not None else None
        ceilings = (
            roofline.ncu_ceilings(roofline.step_kernels(config_kernels))
            if config_kernels is not None and not config_kernels.empty
            else None
        )
        sources = (
            ", ".join(sorted(set(selected["source"]))) or "no points: out of memory or not timed"
        )
        title = (
            f"{args.device} {args.model} {args.precision} bs{args.batch_size} {args.variant}: "
            f"hierarchical roofline ({sources})"
        )
        figure = plot_config_roofline(
            selected,
            title=title,
            ncu_ceilings=ceilings,
            precision=args.precision,
            json_roofs=(
                roofline.json_ceilings(document, [roofline.PRECISION_DTYPE[args.precision]])
                if document and args.precision in roofline.PRECISION_DTYPE
                else []
            ),
        )
    else:
        device_points = points[points["device"].astype(str) == args.device]
        device_kernels = (
            kernels[kernels["device"].astype(str) == args.device] if kernels is not None else None
        )
        ceilings = (
            roofline.ncu_ceilings(roofline.step_kernels(device_kernels))
            if device_kernels is not None and not device_kernels.empty
            else None
        )
        dtypes = [
            roofline.PRECISION_DTYPE[p]
            for p in sorted(set(device_points["precision"]))
            if p in roofline.PRECISION_DTYPE
        ]
        tensor_peaks = {}
        if device_kernels is not None:
            for precision, group in roofline.step_kernels(device_kernels).groupby("precision"):
                value = roofline.ncu_ceilings(group)["peak_flop_s_tensor"]
                if value == value:  # not NaN
                    tensor_peaks[precision] = value
        figure = plot_device_steps(
            device_points,
            device=args.device,
            ncu_ceilings=ceilings,
            ncu_tensor_peaks=tensor_peaks,
            json_roofs=roofline.json_ceilings(document, dtypes) if document else [],
        )
    try:
        with atomic_path(args.output) as tmp:
            figure.savefig(tmp, format="png", dpi=150, bbox_inches="tight")
    finally:
        plt.close(figure)
    return 0
