"""At what time scale does a CPU measurement's noise sit: the window, the process, or the host?

Inside one process two timed windows differ by a few percent; separate processes of the same
configuration differ by 8-15% on a 2-vCPU VM. That process level is either something fixed
per process (its seed, its heap layout, the cores it landed on) or the host's capacity
drifting over seconds, which processes a few seconds apart sample like any two stretches of
time. The two call for different designs: a fixed per-process level needs many processes,
a temporal one is cancelled by alternating the compared configurations at a finer grain.

This benchmark runs, back to back on one machine:

  long     one process timing many windows in a row (engine: `build_training` +
           `time_window`, as a worker does);
  engine   short processes of the same configuration, each timing a few windows;
  plain    short processes running a hand-written training loop (no nnperf engine: the
           model's nn.Module, SGD, cross-entropy, `time.perf_counter`), so the process spread
           can be told apart from anything the engine adds.

It prints the window-to-window and process-to-process spread (CV with a bootstrap 95% CI,
scipy.stats.bootstrap), and the long process's Allan deviation at growing time scales beside
what independent windows would give (their CV / sqrt(n)): where the observed deviation stays
above the independent one, variance lives at that time scale. The verdict line compares the
long process's spread over stretches as long as a short process's windows with the spread
between short processes: about equal means the process level is temporal.

First run on a quiet 2-vCPU VM (AMD EPYC), 2026-11-27, `--batch-size 16 --processes 6`
(fp32): window to window inside one process 6.5%; 3-window stretches of the long process
5.6%; separate processes 7.0% (engine) and 9.3% (plain loop); Allan deviation over what
independent windows would give 0.73 at 1.5 s, 1.19 at 6 s, 1.74 at 12 s, 1.50 at 24 s. The
process level is temporal: the host's capacity changing over seconds, not something fixed
per process (benchmarks/alternation_grain.py acts on it).

Not a test: run it on a quiet machine (nothing else using the cores).

    PYTHONPATH=src python benchmarks/noise_timescales.py --batch-size 16 --processes 6
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


def synthetic_batch_source(batch_size: int, seed: int):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(1024, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, size=1024).astype(np.int64)
    return images, labels


def engine_windows(args) -> list[dict]:
    """Windows timed by nnperf's engine, as a worker times them."""
    from nnperf.core.contract import TrainingSettings
    from nnperf.core.variant import parse_variant_settings
    from nnperf.engine import allocator
    from nnperf.engine.step import build_training, seed_everything
    from nnperf.engine.timing import DeviceMemoryTracker, time_window, warmup_step
    from nnperf.workload.models import build_model

    allocator.fix_thresholds()
    seed_everything(args.seed)
    images, labels = synthetic_batch_source(args.batch_size, args.seed)
    training = build_training(
        build_model(args.model, 10),
        device="cpu",
        precision=args.precision,
        batch_size=args.batch_size,
        settings=parse_variant_settings({}),
        hyper=TrainingSettings(),
        seed=args.seed,
        images=images,
        labels=labels,
        mean=CIFAR_MEAN,
        std=CIFAR_STD,
        input_size=32,
    )
    memory = DeviceMemoryTracker(training.device)
    for _ in range(args.warmup):
        warmup_step(training, memory)
    windows = []
    for _ in range(args.windows):
        started = time.time()
        result = time_window(training, args.steps, memory)
        windows.append({"start": started, "rate": args.batch_size * args.steps / result.window_s})
    return windows


def plain_windows(args) -> list[dict]:
    """The same work in a loop written by hand, the way a user times training without nnperf."""
    import torch

    from nnperf.workload.models import build_model

    torch.manual_seed(args.seed)
    images, labels = synthetic_batch_source(args.batch_size, args.seed)
    x_all = torch.from_numpy(images).permute(0, 3, 1, 2).float().div(255)
    x_all = (x_all - torch.tensor(CIFAR_MEAN)[:, None, None]) / torch.tensor(CIFAR_STD)[
        :, None, None
    ]
    y_all = torch.from_numpy(labels)
    model = build_model(args.model, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16")
    batches = len(x_all) // args.batch_size
    position = 0

    def step():
        nonlocal position
        lo = (position % batches) * args.batch_size
        position += 1
        x, y = x_all[lo : lo + args.batch_size], y_all[lo : lo + args.batch_size]
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    windows = []
    for _ in range(args.windows):
        started, t0 = time.time(), time.perf_counter()
        for _ in range(args.steps):
            step()
        windows.append(
            {"start": started, "rate": args.batch_size * args.steps / (time.perf_counter() - t0)}
        )
    return windows


def run_process(kind: str, args, windows: int, seed: int) -> list[dict]:
    command = [
        sys.executable,
        __file__,
        "--child",
        kind,
        *("--model", args.model, "--precision", args.precision),
        *("--batch-size", str(args.batch_size), "--steps", str(args.steps)),
        *("--windows", str(windows), "--warmup", str(args.warmup), "--seed", str(seed)),
    ]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def cv(values) -> float:
    values = np.asarray(values, dtype=float)
    return float(np.std(values, ddof=1) / np.mean(values))


def cv_with_ci(values) -> str:
    from scipy.stats import bootstrap

    if len(values) < 3:
        return f"{cv(values):6.1%} (too few for a CI)"
    ci = bootstrap((np.asarray(values),), cv, n_resamples=2000, random_state=0).confidence_interval
    return f"{cv(values):6.1%} (95% CI {ci.low:.1%}-{ci.high:.1%})"


def allan_deviation(rates: np.ndarray, block: int) -> float:
    """Relative Allan deviation of a rate series at `block` windows.

    Written by hand: numpy has none and allantools would be a dependency for five lines.
    Half the mean squared difference of consecutive block means, over the mean.
    """
    n_blocks = len(rates) // block
    means = rates[: n_blocks * block].reshape(n_blocks, block).mean(axis=1)
    if n_blocks < 3:
        return float("nan")
    return float(np.sqrt(0.5 * np.mean(np.diff(means) ** 2)) / rates.mean())


def report(long: list[dict], engine: list[list[dict]], plain: list[list[dict]]) -> None:
    rates = np.array([w["rate"] for w in long])
    window_s = float(np.median(np.diff([w["start"] for w in long])))
    within = float(np.mean([cv([w["rate"] for w in p]) for p in engine]))
    print(f"window: {window_s:.2f} s; long process: {len(rates)} windows, {rates.mean():.1f} img/s")
    print(
        f"window to window, inside one process: CV {cv(rates):.1%} (short processes' mean {within:.1%})"
    )
    print("\nAllan deviation of the long process (variance that lives at each time scale):")
    print(f"{'windows':>8} {'seconds':>8} {'observed':>9} {'independent':>12} {'ratio':>6}")
    white = cv(rates)
    block = 1
    while len(rates) // block >= 3:
        observed = allan_deviation(rates, block)
        independent = white / np.sqrt(block)
        print(
            f"{block:8d} {block * window_s:8.1f} {observed:9.2%} {independent:12.2%} "
            f"{observed / independent:6.2f}"
        )
        block *= 2
    print("\nprocess to process (each process's mean over its windows):")
    for name, processes in (("engine", engine), ("plain loop", plain)):
        means = [float(np.mean([w["rate"] for w in p])) for p in processes]
        print(
            f"  {name:11} {len(means)} processes, {np.mean(means):7.1f} img/s, CV {cv_with_ci(means)}"
        )
    per_process = len(engine[0])
    stretch = [
        float(rates[i : i + per_process].mean())
        for i in range(0, len(rates) - per_process + 1, per_process)
    ]
    between = cv([float(np.mean([w["rate"] for w in p])) for p in engine])
    if len(stretch) < 3 or len(engine) < 4:
        print("\nverdict: too few stretches or processes to tell the time scales apart")
        return
    print(
        f"\nverdict: stretches of {per_process} windows inside the long process differ by "
        f"CV {cv(stretch):.1%}; separate processes by CV {between:.1%}. "
        + (
            "Comparable: the process level is mostly the host's capacity over time, which "
            "finer-grained alternation cancels."
            if cv(stretch) >= 0.5 * between
            else "Processes differ by more than stretches of time do: the process level is "
            "mostly fixed per process, which only more processes average out."
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=("engine", "plain"))
    parser.add_argument("--model", default="resnet18_cifar")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=4, help="steps per window")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--windows", type=int, default=3, help="windows per short process")
    parser.add_argument("--long-windows", type=int, default=48)
    parser.add_argument("--processes", type=int, default=6, help="short processes of each kind")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.child:
        windows = engine_windows(args) if args.child == "engine" else plain_windows(args)
        print(json.dumps(windows))
        return
    torch_threads = os.environ.get("OMP_NUM_THREADS", "torch's default")
    print(
        f"{args.model} {args.precision} bs{args.batch_size} on {os.cpu_count()} cores ({torch_threads} threads)"
    )
    long = run_process("engine", args, args.long_windows, seed=0)
    engine, plain = [], []
    for index in range(args.processes):
        # Alternated, so a drift of the host over the run reaches both kinds alike.
        engine.append(run_process("engine", args, args.windows, seed=index + 1))
        plain.append(run_process("plain", args, args.windows, seed=index + 1))
    report(long, engine, plain)


if __name__ == "__main__":
    main()
