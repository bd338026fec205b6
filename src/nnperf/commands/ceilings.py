"""`nnperf ceilings`: measure this machine's roofs and write results/ceilings/{device}.json.

Every flag mirrors a key under `ceilings:` in config/config.yaml. The command is a timed
measurement: run it alone (the workflow holds `bench_slot` for it).
"""

from __future__ import annotations

import argparse

from nnperf import ceilings
from nnperf.devices import DEVICES, resolve_device
from nnperf.errors import NnperfError
from nnperf.files import write_json
from nnperf.peaks import DEFAULT_FMA_UNITS


def _bytes(text: str) -> int:
    try:
        return ceilings.parse_bytes(text)
    except NnperfError as exc:  # argparse reports ArgumentTypeError as a usage error
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "ceilings",
        help="measure GEMM FLOP/s and memory bandwidth roofs next to datasheet peaks",
        description=(
            "Measure compute roofs (square GEMM per precision the device runs), main-memory "
            "bandwidth (STREAM copy and triad, STREAM byte counting) and a working-set sweep, "
            "match the device to config/peaks.yaml, and write the ceilings JSON."
        ),
    )
    parser.add_argument(
        "--device",
        default="auto",
        choices=(*DEVICES, "auto"),
        help="device to measure; auto = best present (default: %(default)s)",
    )
    parser.add_argument("--out", required=True, help="output JSON, e.g. results/ceilings/cpu.json")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads (torch.set_num_threads); give the count the timed runs use "
        "(default: torch's default)",
    )
    parser.add_argument(
        "--gemm-sizes",
        type=int,
        nargs="+",
        default=None,
        metavar="N",
        help="square GEMM sizes M=N=K to try; the roof is the best "
        "(default: cpu 512 1024 2048, cuda 2048 4096 8192, mps 1024 2048 4096)",
    )
    parser.add_argument(
        "--trials",
        type=int,
        default=ceilings.DEFAULT_TRIALS,
        help="timed trials per measurement; best and median are reported (default: %(default)s)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=ceilings.DEFAULT_WARMUP,
        help="untimed warm-up calls before each measurement (default: %(default)s)",
    )
    parser.add_argument(
        "--min-trial-s",
        type=float,
        default=None,
        help="shortest timed window; calls per trial are calibrated to reach it "
        "(default: cpu 0.02, cuda/mps 0.05)",
    )
    parser.add_argument(
        "--bandwidth-bytes",
        type=_bytes,
        default=None,
        help="bytes per copy/triad array, e.g. 512MiB "
        "(default: max(4 x last-level cache, 256 MiB))",
    )
    parser.add_argument(
        "--sweep-min-bytes",
        type=_bytes,
        default=ceilings.DEFAULT_SWEEP_MIN_BYTES,
        help="smallest working set of the sweep (default: 16KiB)",
    )
    parser.add_argument(
        "--sweep-max-bytes",
        type=_bytes,
        default=ceilings.DEFAULT_SWEEP_MAX_BYTES,
        help="largest working set of the sweep (default: 1GiB)",
    )
    parser.add_argument(
        "--sweep-steps-per-octave",
        type=int,
        default=ceilings.DEFAULT_SWEEP_STEPS_PER_OCTAVE,
        help="working sets per doubling of size (default: %(default)s)",
    )
    parser.add_argument(
        "--peaks", default="config/peaks.yaml", help="datasheet peaks YAML (default: %(default)s)"
    )
    parser.add_argument(
        "--cpu-clock-hz",
        type=float,
        default=None,
        help="CPU clock for the derived CPU peak (default: cpufreq max, else /proc/cpuinfo)",
    )
    parser.add_argument(
        "--cpu-fma-units",
        type=int,
        default=DEFAULT_FMA_UNITS,
        help="vector FMA units per core for the derived CPU peak (default: %(default)s)",
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    device = resolve_device(args.device)
    document = ceilings.measure_ceilings(
        device,
        threads=args.threads,
        gemm_sizes=args.gemm_sizes,
        trials=args.trials,
        warmup=args.warmup,
        min_trial_s=args.min_trial_s,
        bandwidth_bytes=args.bandwidth_bytes,
        sweep_min_bytes=args.sweep_min_bytes,
        sweep_max_bytes=args.sweep_max_bytes,
        sweep_steps_per_octave=args.sweep_steps_per_octave,
        peaks_path=args.peaks,
        cpu_clock_hz=args.cpu_clock_hz,
        cpu_fma_units=args.cpu_fma_units,
    )
    write_json(args.out, document)
    measured = document["measured"]
    flops = ", ".join(f"{p} {v / 1e9:.1f} GFLOP/s" for p, v in measured["gemm_flop_s"].items())
    print(
        f"{document['device_name']}: {flops}; memory {measured['memory_bandwidth_bytes_s'] / 1e9:.1f} GB/s "
        f"({measured['memory_bandwidth_kernel']}) -> {args.out}"
    )
    return 0
