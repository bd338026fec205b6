"""How tight are a study's paired comparisons, round to round? Before and after a change.

Reads runs.csv of one or more studies (results/tables/<dataset>/runs.csv, or a committed
example's) and prints, per paired comparison (each variant against the baseline at its
precision, each precision against fp32 in its variant, within one group), the rounds it is
paired on and their grain (`nnperf.core.ratios.pairing_rounds`: the rounds the two shared a
process in, windows taking turns, where there are two or more; else every round in common),
the standard deviation of the per-round log ratios (the round-to-round spread an interval is
built from) and the paired ratio with its 95% CI half-width. The same pairing the report's
comparisons.csv uses (`nnperf.report.comparisons.pairing`).

    PYTHONPATH=src python benchmarks/pair_spread.py \\
        reports/examples/cpu-default-study/runs.csv results/tables/synthetic/runs.csv

Not a test: it reads what studies measured. First use, 2026-11-28, on a quiet 2-vCPU VM:
the committed CPU example (process grain) against the default study at the window grain;
the numbers are in the docstring's end once measured.
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
    """(group, config A, config B) of every comparison a group states."""
    configs = runs.loc[runs["status"].astype(str) == "ok", CONFIG].drop_duplicates()
    for (device, model, batch), members in configs.groupby(["device", "model", "batch_size"]):
        rows = members.to_dict("records")
        for a in rows:
            for b in rows:
                variant = a["precision"] == b["precision"] and (
                    b["variant"] == REFERENCE_VARIANT != a["variant"]
                )
                precision = a["variant"] == b["variant"] and (
                    b["precision"] == REFERENCE_PRECISION != a["precision"]
                )
                if variant or precision:
                    yield f"{device}/{model}/bs{batch}", a, b


def spread_rows(runs: pd.DataFrame) -> list[dict]:
    """One row per paired comparison in `runs` (a runs.csv table)."""
    rows = []
    for group, a, b in _pairs(runs):
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
                "group": group,
                "a": f"{a['precision']} {a['variant']}",
                "b": f"{b['precision']} {b['variant']}",
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
