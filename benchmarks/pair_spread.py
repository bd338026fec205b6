"""How tight are a study's paired comparisons, round to round? Before and after a change.

Reads runs.csv of one or more studies (results/tables/<dataset>/runs.csv, or a committed
example's) and prints, per paired comparison (each variant against the baseline, each
precision against fp32, each batch size against the smallest, within one group), the rounds it is
paired on and their grain (`nnperf.core.ratios.pairing_rounds`: the rounds the two shared a
process in, windows taking turns, where there are two or more; else every round in common),
the standard deviation of the per-round log ratios (the round-to-round spread an interval is
built from) and the paired ratio with its 95% CI half-width. The same pairing the report's
comparisons.csv uses (`nnperf.report.comparisons.pairing`).

    PYTHONPATH=src python benchmarks/pair_spread.py \\
        reports/examples/cpu-default-study/runs.csv results/tables/synthetic/runs.csv

Not a test: it reads what studies measured. On a quiet 2-vCPU VM, 2026-11-28: the median
round-to-round SD was 5.3% in the CPU example measured a process per configuration and round,
3.4% in the next one at the window grain (batch sizes then in groups of their own: not
paired), and 3.3% and 3.0% in two default studies with batch sizes in one group (batch
pairs 4.4% and 2.9%, as tight as the others: precision 2.9% and 3.5%, variant 2.0% and 3.0%).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from nnperf.core import ratios
from nnperf.core.vocab import REFERENCE_PRECISION, REFERENCE_VARIANT
from nnperf.report import comparisons

CONFIG = ["device", "model", "batch_size", "precision", "variant"]


def _pairs(runs: pd.DataFrame):
    """(kind, config A, config B) of every comparison a group states: each variant against
    the baseline, each precision against fp32, each batch size against the smallest, the
    other keys alike (`nnperf.engine.interleave.comparisons`). Batch pairs measured in groups
    of their own (before batch sizes shared a group) are not paired and are left out."""
    configs = runs.loc[runs["status"].astype(str) == "ok", CONFIG].drop_duplicates()
    for _, members in configs.groupby(["device", "model"]):
        rows = members.to_dict("records")
        smallest = min(row["batch_size"] for row in rows)
        for a in rows:
            for b in rows:
                differ = {key for key in CONFIG if a[key] != b[key]}
                if differ == {"variant"} and b["variant"] == REFERENCE_VARIANT:
                    yield "variant", a, b
                if differ == {"precision"} and b["precision"] == REFERENCE_PRECISION:
                    yield "precision", a, b
                if differ == {"batch_size"} and b["batch_size"] == smallest:
                    yield "batch", a, b


def spread_rows(runs: pd.DataFrame) -> list[dict]:
    """One row per paired comparison in `runs` (a runs.csv table)."""
    rows = []
    for kind, a, b in _pairs(runs):
        rates = [comparisons.process_rates(runs, config) for config in (a, b)]
        paired = comparisons.pairing(*rates)
        if paired is None:
            continue
        pairs, grain = paired
        logs = np.log(pairs["a"].to_numpy() / pairs["b"].to_numpy())
        ci = ratios.paired_ratio(pairs["a"].tolist(), pairs["b"].tolist())
        half = (ci.high - ci.low) / 2 / ci.ratio if ci.bounded else math.nan
        rows.append(
            {
                "kind": kind,
                "a": f"{a['model']} {a['precision']} bs{a['batch_size']} {a['variant']}",
                "b": f"{b['precision']} bs{b['batch_size']} {b['variant']}",
                "grain": grain,
                "pairs": len(logs),
                "log_ratio_sd": float(np.std(logs, ddof=1)) if len(logs) > 1 else math.nan,
                "ratio": ci.ratio,
                "ci_half_width": half,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="runs.csv files, one per study")
    args = parser.parse_args(argv)
    pd.set_option("display.width", 120)
    for path in args.runs:
        table = pd.DataFrame(spread_rows(pd.read_csv(path)))
        print(f"\n{path}")
        if table.empty:
            print("  no paired comparison")
            continue
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        print(f"  median round-to-round SD of log ratios: {table['log_ratio_sd'].median():.3f}")
        by_kind = table.groupby("kind")["log_ratio_sd"].median()
        print("  by kind: " + ", ".join(f"{kind} {sd:.3f}" for kind, sd in by_kind.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
