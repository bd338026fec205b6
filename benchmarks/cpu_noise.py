"""Where does the window-to-window noise of a CPU measurement come from?

Runs one configuration's timed windows (`nnperf.engine.step.build_training` +
`nnperf.engine.timing.time_window`, as a worker does) in fresh processes under one treatment
each, rounds interleaved (treatment order reversed every round, so drift hits all alike),
and prints per treatment the coefficient of variation of window throughput within a process,
its ratio to the default's, the median throughput ratio, and the page faults per step and
system time (share of user time) the windows cost. Treatments:

  default       what a worker does today (glibc's malloc thresholds fixed:
                `nnperf.engine.allocator`)
  passive       OMP_WAIT_POLICY=PASSIVE (idle OpenMP threads sleep instead of spinning)
  active        OMP_WAIT_POLICY=ACTIVE (they always spin)
  fewer_threads torch.set_num_threads(cores - 1): one core left for everything else
  no_gc         Python's garbage collector off during windows
  long_windows  4x the steps per window (same total steps)
  flush_denormal torch.set_flush_denormal(True): subnormal floats (which x86 cores compute
                up to 100x slower, and which appear or not depending on a process's seed)
                flushed to zero
  dynamic_malloc glibc's dynamic mmap threshold, as workers ran before: it follows each
                process's history of frees, so processes can differ in whether a step's large
                tensors are fresh mmaps (page-faulted every step) or reused heap
  thp           THP_MEM_ALLOC_ENABLE=1: torch's CPU allocator asks for transparent huge
                pages for blocks of 2 MiB and more
  same_seed     every process seeded alike: whether the seed (weights, data) is the process
                level

Each round uses another seed (initial weights, data), as the engine's processes do, so the
spread of the per-process means shows the process level.

Not a test: run it on a quiet machine.

    PYTHONPATH=src python benchmarks/cpu_noise.py --batch-size 32 --rounds 2 --windows 12
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

TREATMENTS = (
    "default",
    "passive",
    "active",
    "fewer_threads",
    "no_gc",
    "long_windows",
    "flush_denormal",
    "dynamic_malloc",
    "thp",
    "same_seed",
)
# torch's CPU allocator asks for transparent huge pages (madvise) for blocks of 2 MiB and up.
THP = {"THP_MEM_ALLOC_ENABLE": "1"}


def child(args) -> None:
    """One process, one treatment: prints the window throughputs as JSON."""
    import gc
    import resource

    import numpy as np
    import torch

    from nnperf.core.contract import TrainingSettings
    from nnperf.core.variant import parse_variant_settings
    from nnperf.engine import allocator
    from nnperf.engine.step import build_training, seed_everything
    from nnperf.engine.timing import DeviceMemoryTracker, time_window, warmup_step
    from nnperf.workload.models import build_model

    if args.treatment != "dynamic_malloc":
        allocator.fix_thresholds()
    if args.treatment == "flush_denormal":
        torch.set_flush_denormal(True)
    if args.treatment == "fewer_threads":
        torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
    seed_everything(args.seed)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(1024, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, size=1024).astype(np.int64)
    settings = parse_variant_settings(json.loads(args.variant))
    training = build_training(
        build_model(args.model, 10),
        device="cpu",
        precision=args.precision,
        batch_size=args.batch_size,
        settings=settings,
        hyper=TrainingSettings(),
        seed=args.seed,
        images=images,
        labels=labels,
        mean=(0.4914, 0.4822, 0.4465),  # CIFAR-10 channel statistics
        std=(0.2470, 0.2435, 0.2616),
        input_size=32,
    )
    memory = DeviceMemoryTracker(training.device)
    for _ in range(3):
        warmup_step(training, memory)
    steps = args.steps * (4 if args.treatment == "long_windows" else 1)
    windows = args.windows // (4 if args.treatment == "long_windows" else 1)
    rates = []
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(windows):
        if args.treatment == "no_gc":
            gc.disable()
        result = time_window(training, steps, memory)
        if args.treatment == "no_gc":
            gc.enable()
        rates.append(args.batch_size * steps / result.window_s)
    usage_after = resource.getrusage(resource.RUSAGE_SELF)
    per_step = 1 / (windows * steps)
    print(
        json.dumps(
            {
                "rates": rates,
                "faults_per_step": (usage_after.ru_minflt - usage_before.ru_minflt) * per_step,
                "sys_share": (usage_after.ru_stime - usage_before.ru_stime)
                / max(1e-9, (usage_after.ru_utime - usage_before.ru_utime)),
            }
        )
    )


def run(treatment: str, args, seed: int) -> dict:
    env = dict(os.environ)
    if treatment in ("passive", "active"):
        env["OMP_WAIT_POLICY"] = treatment.upper()
    if treatment == "thp":
        env.update(THP)
    if treatment == "same_seed":
        seed = 0
    command = [
        sys.executable,
        __file__,
        "--child",
        "--treatment",
        treatment,
        *("--model", args.model, "--precision", args.precision),
        *("--batch-size", str(args.batch_size), "--steps", str(args.steps)),
        *("--windows", str(args.windows), "--variant", args.variant),
        *("--seed", str(seed)),
    ]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def cv(values) -> float:
    return statistics.stdev(values) / statistics.mean(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--treatment", default="default", choices=TREATMENTS)
    parser.add_argument("--treatments", nargs="*", default=list(TREATMENTS))
    parser.add_argument("--model", default="resnet18_cifar")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--windows", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variant", default="{}", help="variant toggles as JSON")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    processes: dict[str, list[dict]] = {t: [] for t in args.treatments}
    for round_index in range(args.rounds):
        order = args.treatments if round_index % 2 == 0 else args.treatments[::-1]
        for treatment in order:
            processes[treatment].append(run(treatment, args, seed=round_index))
    series = {t: [p["rates"] for p in runs] for t, runs in processes.items()}
    base_cv = statistics.mean(cv(s) for s in series["default"]) if "default" in series else None
    base_rate = (
        statistics.median(r for s in series["default"] for r in s) if "default" in series else None
    )
    print(
        f"{'treatment':14} {'window CV':>9} {'CV ratio':>8} {'process CV':>10} "
        f"{'median img/s':>12} {'rate ratio':>10} {'faults/step':>11} {'sys/user':>8}"
    )
    for treatment, runs in series.items():
        within = statistics.mean(cv(s) for s in runs)
        between = cv([statistics.mean(s) for s in runs]) if len(runs) > 1 else float("nan")
        rate = statistics.median(r for s in runs for r in s)
        faults = statistics.mean(p["faults_per_step"] for p in processes[treatment])
        sys_share = statistics.mean(p["sys_share"] for p in processes[treatment])
        print(
            f"{treatment:14} {within:9.1%} {within / base_cv if base_cv else float('nan'):8.2f} "
            f"{between:10.1%} {rate:12.1f} "
            f"{rate / base_rate if base_rate else float('nan'):10.3f} {faults:11.0f} "
            f"{sys_share:8.1%}"
        )


if __name__ == "__main__":
    main()
