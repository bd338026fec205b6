"""Does alternating compared configurations window by window, in one process, narrow their ratios?

benchmarks/noise_timescales.py found the process level of a CPU measurement on a 2-vCPU VM to
be mostly the host's capacity changing over seconds. The engine pairs a comparison's
configurations process by process (`nnperf.engine.interleave`: one process each per round,
A B | B A ...), so whatever changes in the seconds between two partners stays in their
ratio. Alternating them window by window inside one process would cancel it, at the price
of whatever two trainings in one process do to each other. This benchmark measures both.

It measures the default study's batch-16 group on the CPU (variants and `training:` from
config/config.yaml): fp32 baseline, fp32 tuned and bf16 baseline, for two comparisons,
tuned / baseline at fp32 and bf16 / fp32 at baseline. Rounds alternate two grains, in
balanced order (process grain first in even rounds, window grain first in odd ones) so the
host's drift reaches both alike:

  process  a worker process per configuration, in balanced order
           (`interleave.balanced_order`), each warming up and timing `--windows` windows:
           the engine's grain under `timing.pairing: process` (at this noise its
           processes run `min_windows`);
  window   one worker process holding all three trainings (each with its own model,
           optimizer and data feeder, per its variant and precision), warming each up and
           then timing one window of each in balanced order (A B C | C B A ...), for as long
           as the round's process grain took, start-up included: the same wall time. A
           fresh one each round, as the engine's shared processes are (`timing.pairing:
           window`, `nnperf.engine.sharing`, built on what this benchmark found): several
           processes are still needed for the absolute throughputs, which only processes
           replicate.

Workers are forked from a server that has imported torch and the worker's modules
(`worker.PRELOAD`), as the engine's are; a training is `build_training`, a window
`time_window` with the configuration's `timed_steps`, the warm-up `warmup_step`.

Printed per comparison and grain: the ratio with its 95% CI (`ratios.paired_ratio` over
matched pairs), the round-to-round spread of the pair ratios (CV with a scipy.stats.bootstrap
95% CI) and the number of pairs. The window grain is paired three ways: by window round (one
window each: the most pairs, and an interval that assumes windows independent), by blocks of
`--windows` window rounds (the same timed work per pair as a process pair, so its CV compares
like with like), and by process (one pair per round: the interval that holds if a process
carried a ratio of its own).

Interference: each configuration's throughput in the shared process over its throughput
alone in its own process of the same round, paired by round (`paired_ratio`), with its CI.
Besides the partner it holds what else differs between the two kinds of process: the shared
one runs longer (its later windows come after more steps) and its own windows are broken up
by the others'. What two trainings in one process share: the heap (glibc malloc's arenas and
torch's CPU allocator), the caches (each switch brings a different model's weights and
activations into them), torch's intra-op thread pool (one size for all) and the
process-global switches `build_training` sets (`apply_process_settings`: thread count, the
TF32 switches, cudnn.benchmark), which this benchmark applies again before each window (the
engine shares a process only between trainings whose switches are alike,
`core.variant.sharing_key`, so it has nothing to set again). channels_last, the optimizer implementation and the data
path are per model, optimizer and feeder, so variants that differ only in them share a
process; fp32, bf16 and fp16 set the same switches (TF32 off), tf32 differs from them only in
switches that can be set before each window. What cannot share one: torch.compile modes (the
dynamo caches, recompilation limits and the inductor's threads are per process, and a CUDA
graph pool is shared), DataLoader worker counts (the worker processes compete for the cores
in the other configuration's windows too), cpu_threads that differ (torch's pool is resized
per call, OpenMP's is not cheaply) and anything set by environment variables before torch
loads (allocator settings, OMP_*).

Not a test: run it on a quiet machine (nothing else using the cores). The JSON at `--output`
holds every window.

    PYTHONPATH=src python benchmarks/alternation_grain.py --seconds 150

First run on a quiet 2-vCPU VM (AMD EPYC, torch 2.14 on 2 threads), 2026-11-28 03:19 UTC,
1-minute load average 0.00 before and 0.15 at the start, no window beside other load; 5 min
9 s: 22 rounds, 154 s of process grain, 143 s of window grain, 132 windows each (a round's
processes took 6-8 s, so each shared process had time for its minimum, 2 window rounds:
pairs "by 2 windows" and "by process" are the same pairs, the same timed work per pair as
the process grain's):

    comparison              grain                 pairs  ratio  95% CI       +/-   pair CV (95% CI)
    tuned / baseline, fp32  process (today)          22  1.087  1.029-1.147  5.4%  13.1% (6.7-21.7%)
    tuned / baseline, fp32  window, by window        44  1.056  1.040-1.073  1.5%   5.0% (4.1-6.8%)
    tuned / baseline, fp32  window, by 2 windows     22  1.056  1.042-1.071  1.4%   3.1% (2.6-3.7%)
    bf16 / fp32, baseline   process (today)          22  1.769  1.669-1.875  5.8%  14.4% (9.2-20.9%)
    bf16 / fp32, baseline   window, by window        44  1.731  1.699-1.763  1.9%   6.0% (4.3-8.3%)
    bf16 / fp32, baseline   window, by 2 windows     22  1.731  1.696-1.767  2.1%   4.7% (3.4-6.6%)

    shared/alone (22 rounds): fp32 baseline +2.5% (95% CI -2.2% to +7.5%), fp32 tuned -0.3%
    (-4.2% to +3.8%), bf16 baseline +0.4% (-4.5% to +5.5%); a switch (bf16 baseline's window
    after itself over after another, 22 pairs): 0.993 (0.972-1.013).

The finer grain cut the pair ratios' spread by 3-4x (13.1% to 3.1%, 14.4% to 4.7%) and the
ratios' intervals from +/-5.4-5.8% to +/-1.4-2.1% for the same pairs, windows and wall time;
no interference was seen, though a cross-process comparison resolves only differences
beyond about 5%, and the switch cost within 3%.

Second run, a day later on a VM of the same kind (2026-11-28 05:47 UTC, 1-minute load average
0.58, nothing else running; 24 rounds), when the default study's steps themselves varied by
8-12% (its steps.csv):

    comparison              grain                 pairs  ratio  95% CI       +/-   pair CV (95% CI)
    tuned / baseline, fp32  process (today)          24  1.034  1.000-1.068  3.3%   7.7% (5.6-10.7%)
    tuned / baseline, fp32  window, by 2 windows     24  1.036  1.009-1.064  2.7%   5.9% (3.6-10.7%)
    bf16 / fp32, baseline   process (today)          24  1.700  1.625-1.778  4.5%   9.8% (6.6-16.3%)
    bf16 / fp32, baseline   window, by 2 windows     24  1.730  1.678-1.784  3.1%   7.2% (5.6-9.1%)

    shared/alone: +0.3% (-3.2% to +3.9%), +0.5% (-3.8% to +5.0%), +2.1% (-3.6% to +8.1%);
    switch 0.982 (0.952-1.013).

The gain was 0.73-0.77x, not 3-4x: that day most of a pair's spread was the windows' own
(two adjacent windows' ratio varied by 7-9%), which no pairing cancels; what the window grain
cancels, the host's changes over seconds, was the smaller part. Where the noise sits varies
from day to day on a shared VM; the window grain never did worse.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from noise_timescales import CIFAR_MEAN, CIFAR_STD, cv, synthetic_batch_source  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# (label, precision, variant): the members of the group, the first the reference of both.
MEMBERS = (
    ("fp32 baseline", "fp32", "baseline"),
    ("fp32 tuned", "fp32", "tuned"),
    ("bf16 baseline", "bf16", "baseline"),
)
# (label, a, b): member a's throughput over member b's.
COMPARISONS = (("tuned / baseline, fp32", 1, 0), ("bf16 / fp32, baseline", 2, 0))


def worker(
    conn, members: list[int], windows: int, deadline: float | None, seed: int, setup: dict
) -> None:
    """One worker process: a training per member, each warmed up, then timed windows.

    Alone (one member): `windows` windows. Shared: window rounds in balanced order, in
    pairs (forward, backward), at least `windows` rounds, until the next pair would end
    after `deadline`. Sends the windows and closes."""
    from nnperf.core.contract import TrainingSettings
    from nnperf.core.variant import parse_variant_settings
    import torch

    from nnperf.engine import allocator
    from nnperf.engine.interleave import balanced_order
    from nnperf.engine.stability import HostSampler
    from nnperf.engine.step import apply_process_settings, build_training, seed_everything
    from nnperf.engine.timing import DeviceMemoryTracker, time_window, warmup_step
    from nnperf.workload.models import build_model

    allocator.fix_thresholds()
    hyper = TrainingSettings(**setup["training"])
    images, labels = synthetic_batch_source(setup["batch_size"], seed)
    built = {}
    for member in members:
        _, precision, variant = MEMBERS[member]
        settings = parse_variant_settings(setup["variants"][variant])
        seed_everything(seed)
        training = build_training(
            build_model(setup["model"], 10),
            device="cpu",
            precision=precision,
            batch_size=setup["batch_size"],
            settings=settings,
            hyper=hyper,
            seed=seed,
            images=images,
            labels=labels,
            mean=CIFAR_MEAN,
            std=CIFAR_STD,
            input_size=32,
        )
        built[member] = (training, DeviceMemoryTracker(training.device), precision, settings)
    for member in members:
        training, memory, precision, settings = built[member]
        apply_process_settings("cpu", precision, settings)
        for _ in range(hyper.warmup_steps):
            warmup_step(training, memory)
    host = HostSampler(torch.get_num_threads())
    rows = []

    def window(member: int, index: int) -> None:
        training, memory, precision, settings = built[member]
        apply_process_settings("cpu", precision, settings)
        before = host.snapshot()
        result = time_window(training, hyper.timed_steps, memory)
        # The engine's host columns, so a window beside a neighbour's load can be counted.
        fields = host.window_fields(before, host.snapshot(), result.window_s)
        rows.append(
            {
                "member": member,
                "round": index,
                "start": result.started_at_unix,
                "seconds": result.window_s,
                "images": setup["batch_size"] * hyper.timed_steps,
                "window_s": result.window_s,
                **fields,
            }
        )

    index, pair_s = 0, 0.0
    while True:
        if index >= windows and (deadline is None or time.time() + pair_s > deadline):
            break
        started = time.time()
        for _ in range(2 if len(members) > 1 else 1):
            for member in balanced_order(members, index):
                window(member, index)
            index += 1
        pair_s = time.time() - started
    conn.send(rows)
    conn.close()


def run_worker(
    context, members: list[int], windows: int, deadline: float | None, seed: int, setup: dict
) -> dict:
    receive, send = context.Pipe(duplex=False)
    started = time.time()
    process = context.Process(target=worker, args=(send, members, windows, deadline, seed, setup))
    process.start()
    send.close()
    rows = receive.recv()
    process.join()
    if process.exitcode:
        raise SystemExit(f"alternation_grain: a worker exited with {process.exitcode}")
    return {
        "members": members,
        "started": started,
        "wall_s": time.time() - started,
        "windows": rows,
    }


def throughput(rows: list[dict]) -> float:
    """Images over timed seconds, as `stopping.process_throughputs` sums a process."""
    return sum(r["images"] for r in rows) / sum(r["seconds"] for r in rows)


def pair_rates(rounds: list[dict], grain: str, a: int, b: int, block: int) -> list[tuple]:
    """Matched (a, b) throughputs. `process`: a's and b's own processes, one pair a round;
    `window`: the shared process's window rounds, `block` rounds to a pair (0: the whole
    process, one pair a round). A block left short at a process's end is dropped."""
    pairs = []
    for one in rounds:
        if grain == "process":
            by_member = {p["members"][0]: p["windows"] for p in one["process"]}
            pairs.append((throughput(by_member[a]), throughput(by_member[b])))
            continue
        rows = one["window"]["windows"]
        n_rounds = max(r["round"] for r in rows) + 1
        size = block or n_rounds
        for lo in range(0, n_rounds - size + 1, size):
            inside = [r for r in rows if lo <= r["round"] < lo + size]
            pairs.append(
                (
                    throughput([r for r in inside if r["member"] == a]),
                    throughput([r for r in inside if r["member"] == b]),
                )
            )
    return pairs


def spread(ratios_: list[float]) -> dict:
    """CV of the pair ratios with a bootstrap 95% CI (None with fewer than three)."""
    from scipy.stats import bootstrap

    values = np.asarray(ratios_, dtype=float)
    row = {"cv": cv(values), "cv_low": None, "cv_high": None}
    if len(values) >= 3 and np.ptp(values) == 0:  # every resample the same: no spread at all
        row.update(cv_low=0.0, cv_high=0.0)
    elif len(values) >= 3:
        ci = bootstrap((values,), cv, n_resamples=2000, random_state=0).confidence_interval
        row.update(cv_low=float(ci.low), cv_high=float(ci.high))
    return row


def grains(windows: int) -> list[tuple[str, str, int]]:
    return [
        ("process (today)", "process", 0),
        ("window, by window", "window", 1),
        (f"window, by {windows} windows", "window", windows),
        ("window, by process", "window", 0),
    ]


def analyse(rounds: list[dict], windows: int) -> dict:
    from nnperf.core.ratios import paired_ratio

    comparisons = []
    for label, a, b in COMPARISONS:
        for grain_label, grain, block in grains(windows):
            pairs = pair_rates(rounds, grain, a, b, block)
            ci = paired_ratio([p[0] for p in pairs], [p[1] for p in pairs])
            comparisons.append(
                {
                    "comparison": label,
                    "grain": grain_label,
                    "pairs": len(pairs),
                    **ci.as_dict(),
                    **spread([x / y for x, y in pairs]),
                }
            )
    interference = []
    for member, (label, _, _) in enumerate(MEMBERS):
        alone, shared = [], []
        for one in rounds:
            own = [p for p in one["process"] if p["members"][0] == member][0]
            alone.append(throughput(own["windows"]))
            shared.append(
                throughput([r for r in one["window"]["windows"] if r["member"] == member])
            )
        ci = paired_ratio(shared, alone)
        interference.append(
            {
                "configuration": label,
                "alone_img_s": float(np.mean(alone)),
                "shared_img_s": float(np.mean(shared)),
                **ci.as_dict(),
            }
        )
    return {
        "comparisons": comparisons,
        "interference": interference,
        "switch": switch_cost(rounds),
        "disturbed": disturbed(rounds),
    }


def disturbed(rounds: list[dict]) -> dict[str, list[int]]:
    """Per grain: [windows the engine would discard, all windows]. They stay in the numbers
    here (both grains alike); the count says how quiet the machine was."""
    from nnperf.engine.stability import discard_reasons

    counts = {"process": [0, 0], "window": [0, 0]}
    for one in rounds:
        for grain, rows in (
            ("process", [r for p in one["process"] for r in p["windows"]]),
            ("window", one["window"]["windows"]),
        ):
            counts[grain][0] += sum(bool(discard_reasons(r, [])) for r in rows)
            counts[grain][1] += len(rows)
    return counts


def switch_cost(rounds: list[dict]) -> list[dict]:
    """What a switch between trainings costs the window after it, inside the shared process.

    Balanced order repeats the end members (A B C | C B A | A B C): of each repeated pair
    the first window follows another training, the second its own, seconds apart, so the
    pair's ratio (after itself / after another) holds what the switch costs (the caches
    and heap the other training left) with little of the host's drift."""
    from nnperf.core.ratios import paired_ratio

    rows = []
    for member, (label, _, _) in enumerate(MEMBERS):
        after_self, after_other = [], []
        for one in rounds:
            ordered = sorted(one["window"]["windows"], key=lambda r: r["start"])
            for before, first, second in zip(ordered, ordered[1:], ordered[2:]):
                if first["member"] == second["member"] == member and before["member"] != member:
                    after_self.append(second["images"] / second["seconds"])
                    after_other.append(first["images"] / first["seconds"])
        if after_self:
            ci = paired_ratio(after_self, after_other)
            rows.append({"configuration": label, **ci.as_dict()})
    return rows


def half_width(row: dict) -> float:
    """The ratio interval's half width relative to the ratio (nan without an interval)."""
    if row["ratio_ci_low"] is None:
        return math.nan
    return (row["ratio_ci_high"] - row["ratio_ci_low"]) / 2 / row["ratio"]


def percent(value: float) -> str:
    return f"{value:.1%}" if value < 10 else ">999%"


def difference(row: dict) -> str:
    """A ratio as a difference from 1 with its interval: "-1.2% (95% CI -3.0% to +0.6%)"."""
    text = f"{row['ratio'] - 1:+.1%}"
    if row["ratio_ci_low"] is None:
        return text + " (no CI)"
    return f"{text} (95% CI {row['ratio_ci_low'] - 1:+.1%} to {row['ratio_ci_high'] - 1:+.1%})"


def interval(row: dict, prefix: str = "ratio") -> str:
    low, high = row[f"{prefix}_ci_low"], row[f"{prefix}_ci_high"]
    return "no CI" if low is None else f"{low:.3f}-{high:.3f}"


def print_table(result: dict) -> None:
    counts = result["disturbed"]
    print(
        "windows beside other load (the engine would measure them again; kept here): "
        + ", ".join(f"{grain} grain {n} of {total}" for grain, (n, total) in counts.items())
    )
    print(
        f"\n{'comparison':24} {'grain':22} {'pairs':>5} {'ratio':>6} {'95% CI':>12}"
        f" {'+/-':>6}  pair-ratio CV (95% CI)"
    )
    for row in result["comparisons"]:
        half = "" if row["ratio_ci_low"] is None else percent(half_width(row))
        cv_ci = "" if row["cv_low"] is None else f" ({row['cv_low']:.1%}-{row['cv_high']:.1%})"
        print(
            f"{row['comparison']:24} {row['grain']:22} {row['pairs']:5d} {row['ratio']:6.3f}"
            f" {interval(row):>12} {half:>6}  {row['cv']:5.1%}{cv_ci}"
        )
    print(
        f"\n{'interference':16} {'alone img/s':>11} {'shared img/s':>12}"
        f" {'shared/alone':>12} {'95% CI':>12} {'rounds':>6}"
    )
    for row in result["interference"]:
        print(
            f"{row['configuration']:16} {row['alone_img_s']:11.1f} {row['shared_img_s']:12.1f}"
            f" {row['ratio']:12.3f} {interval(row):>12} {row['ratio_n']:6d}"
        )
    print(f"\n{'switch cost':16} {'after itself / after another':>28} {'95% CI':>12} {'pairs':>6}")
    for row in result["switch"]:
        print(
            f"{row['configuration']:16} {row['ratio']:28.3f} {interval(row):>12}"
            f" {row['ratio_n']:6d}"
        )


def verdict(result: dict, windows: int) -> str:
    parts = []
    for label, _, _ in COMPARISONS:
        rows = {r["grain"]: r for r in result["comparisons"] if r["comparison"] == label}
        before = rows["process (today)"]
        like = rows[f"window, by {windows} windows"]
        per_process = rows["window, by process"]
        parts.append(
            f"{label}: pair CV {before['cv']:.1%} -> {like['cv']:.1%} at {windows} windows a "
            f"pair ({like['cv'] / before['cv']:.2f}x), CI +/-{percent(half_width(before))} "
            f"({before['pairs']} pairs) -> +/-{percent(half_width(like))} ({like['pairs']}; "
            f"+/-{percent(half_width(per_process))} by process)"
        )
    parts.append(
        "shared/alone "
        + ", ".join(f"{row['configuration']} {difference(row)}" for row in result["interference"])
    )
    return "verdict: " + "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18_cifar")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument(
        "--windows",
        type=int,
        default=2,
        help="windows per process at the process grain (the engine's min)",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=150.0,
        help="wall seconds of each grain (rounds end on an even count)",
    )
    parser.add_argument("--config", default=str(REPO / "config" / "config.yaml"))
    parser.add_argument("--output", default="/tmp/alternation_grain.json")
    args = parser.parse_args()
    config = yaml.safe_load(Path(args.config).read_text())
    setup = {
        "model": args.model,
        "batch_size": args.batch_size,
        "training": config["training"],
        "variants": config["variants"],
    }
    from nnperf.engine.interleave import balanced_order
    from nnperf.engine.worker import PRELOAD

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    # The fork server imports torch once, here, not inside the first round's first process
    # (5 s that would count in that round's wall time, which the window grain matches).
    starter = context.Process(target=time.sleep, args=(0,))
    starter.start()
    starter.join()
    threads = os.environ.get("OMP_NUM_THREADS", "torch's default")
    print(
        f"{args.model} bs{args.batch_size} on {os.cpu_count()} cores ({threads} threads), "
        f"{setup['training']['timed_steps']} steps a window, "
        f"{setup['training']['warmup_steps']} warm-up steps; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"1-minute load average {os.getloadavg()[0]:.2f}"
    )
    rounds, spent, last_process_s = [], {"process": 0.0, "window": 0.0}, None
    index = 0
    while index < 2 or index % 2 or spent["process"] < args.seconds:
        one = {"round": index}
        for grain in ("process", "window") if index % 2 == 0 else ("window", "process"):
            started = time.time()
            if grain == "process":
                one["process"] = [
                    run_worker(context, [member], args.windows, None, index, setup)
                    for member in balanced_order(range(len(MEMBERS)), index)
                ]
                last_process_s = time.time() - started
            else:
                one["window"] = run_worker(
                    context,
                    list(range(len(MEMBERS))),
                    args.windows,
                    started + last_process_s,
                    index,
                    setup,
                )
            spent[grain] += time.time() - started
        rounds.append(one)
        shared = one["window"]["windows"]
        print(
            f"round {index}: process grain {sum(p['wall_s'] for p in one['process']):.1f} s, "
            f"window grain {one['window']['wall_s']:.1f} s "
            f"({max(r['round'] for r in shared) + 1} window rounds)",
            flush=True,
        )
        index += 1
    print(
        f"{len(rounds)} rounds: process grain {spent['process']:.0f} s, "
        f"window grain {spent['window']:.0f} s"
    )
    result = analyse(rounds, args.windows)
    print_table(result)
    print("\n" + verdict(result, args.windows))
    Path(args.output).write_text(
        json.dumps(
            {
                "machine": {
                    "platform": platform.platform(),
                    "cpus": os.cpu_count(),
                    "processor": platform.processor(),
                },
                "args": vars(args),
                "setup": setup,
                "spent_s": spent,
                "rounds": rounds,
                **result,
            },
            indent=1,
        )
    )
    print(f"raw windows: {args.output}")


if __name__ == "__main__":
    main()
