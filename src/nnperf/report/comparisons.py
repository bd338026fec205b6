"""Ratios between configurations, each with its confidence interval, and the tie rule.

Every comparison the report states (a precision against fp32, a variant against the
baseline, one batch size against another, one machine against another) is built here from
the per-process throughputs of runs.csv (one row per worker process), with the intervals of
`nnperf.core.ratios`:

* `ratio_between(runs, a, b)`: A over B, **paired** by `round` when both configurations
  were interleaved in one job (the same non-empty `group`) and share at least two rounds,
  **unpaired** (Fieller) otherwise: runs measured apart, or before interleaving existed
  (no `group` or `round` columns), and whatever pairs across machines or batch sizes.
* `ranking(candidates, runs)`: the one tie rule of the report. A candidate is named best
  only when its ratio's interval against every other candidate excludes 1 on the faster
  side; otherwise every candidate not separated from the leader is named in a tie.
* `speedup_columns(summary, runs, fixed, value)`: summary.csv's `speedup_vs_fp32` and
  `speedup_vs_baseline`, each the estimate of its own interval, with the interval's columns.

Data in, data out: tables and mappings of key values; nothing is read or drawn here. The
sentences that quote these are in the sections (`nnperf.report.sections`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from nnperf.core import ratios
from nnperf.core.ratios import RatioCI
from nnperf.core.vocab import CONFIG_KEYS
from nnperf.core.wording import missing
from nnperf.report import noise
from nnperf.report.configurations import MEAN
from nnperf.report.format import config_text

# The per-process throughput of runs.csv, and the keys that name a configuration there.
RATE = "throughput_img_s"
COMPARE_KEYS = ("machine", *CONFIG_KEYS)
# Paired intervals need two pairs at least: one pair has no spread to build one from.
MIN_PAIRS = 2
UNPAIRED = "unpaired"


def _value(value) -> str:
    """A key's value as text, so 64, 64.0 and "64" (read back from CSV) match."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _group(value) -> str | None:
    """A `group` cell, None where empty (NaN read back from CSV, or "")."""
    return None if missing(value) or value == "" else str(value)


def process_rates(runs: pd.DataFrame | None, config: Mapping) -> pd.DataFrame:
    """The measured worker processes of `config` in `runs`: columns `rate`, `round` and
    `group` (None where the run predates interleaving). Keys `config` names but `runs` lacks
    (`machine` in aggregate's own table) are not matched on."""
    empty = pd.DataFrame(columns=["rate", "round", "group"])
    if runs is None or runs.empty or RATE not in runs.columns:
        return empty
    match = pd.Series(True, index=runs.index)
    for key in COMPARE_KEYS:
        if key in config and key in runs.columns:
            match &= runs[key].map(_value) == _value(config[key])
    if "status" in runs.columns:
        match &= runs["status"].astype(str) == "ok"
    chosen = runs[match]
    rate = pd.to_numeric(chosen[RATE], errors="coerce")
    chosen = chosen[np.isfinite(rate) & (rate > 0)]
    return pd.DataFrame(
        {
            "rate": pd.to_numeric(chosen[RATE]).astype(float),
            "round": (
                pd.to_numeric(chosen["round"], errors="coerce")
                if "round" in chosen.columns
                else math.nan
            ),
            "group": (chosen["group"].map(_group) if "group" in chosen.columns else None),
        }
    ).reset_index(drop=True)


def rates_by_round(rates: pd.DataFrame) -> pd.Series:
    """Mean rate per round: a round run twice in one configuration is averaged."""
    return rates.dropna(subset=["round"]).groupby("round")["rate"].mean()


def paired_rounds(a: pd.DataFrame, b: pd.DataFrame) -> tuple[list, list, list] | None:
    """(rounds, A's rates, B's rates) matched by round, when both ran interleaved in one
    group and share MIN_PAIRS rounds or more; None when they must be compared unpaired."""
    groups_a = set(a["group"].dropna()) if not a.empty else set()
    groups_b = set(b["group"].dropna()) if not b.empty else set()
    if len(groups_a) != 1 or groups_a != groups_b:
        return None
    by_round_a, by_round_b = rates_by_round(a), rates_by_round(b)
    shared = sorted(set(by_round_a.index) & set(by_round_b.index))
    if len(shared) < MIN_PAIRS:
        return None
    return shared, [float(by_round_a[r]) for r in shared], [float(by_round_b[r]) for r in shared]


def ratio_of_rates(a: pd.DataFrame, b: pd.DataFrame) -> RatioCI:
    """A over B from their `process_rates`: paired where `paired_rounds` allows, else Fieller."""
    paired = paired_rounds(a, b)
    if paired is not None:
        return ratios.paired_ratio(*paired[1:])
    return ratios.unpaired_ratio(a["rate"].tolist(), b["rate"].tolist())


def ratio_between(runs: pd.DataFrame | None, a: Mapping, b: Mapping) -> RatioCI:
    """The throughput of configuration `a` over that of `b` (above 1: `a` is faster), from
    their worker processes in `runs`, with its 95% interval (`ratio_of_rates`)."""
    return ratio_of_rates(process_rates(runs, a), process_rates(runs, b))


def unresolved_text(a: pd.DataFrame, b: pd.DataFrame, ci: RatioCI, target: float) -> str | None:
    """Why the comparison of A's and B's `process_rates` stayed unresolved against `target`
    (`nnperf.report.noise.unresolved_comparison`), from the processes `ci` was built from;
    None where it is resolved or nothing was measured."""
    if ci.n == 0 or not math.isfinite(ci.ratio) or ci.resolved(target):
        return None
    paired = paired_rounds(a, b)
    if paired is not None:
        rounds, rates_a, rates_b = paired
        return noise.unresolved_comparison(
            rates_a, rates_b, paired=True, within=ci.within, target=target, rounds=rounds
        )
    return noise.unresolved_comparison(
        a["rate"].tolist(), b["rate"].tolist(), paired=False, within=ci.within, target=target
    )


def method_label(ci: RatioCI) -> str:
    """How a table names the interval's pairing: `paired`, `unpaired` or `n/a`."""
    return {ratios.PAIRED: "paired", ratios.FIELLER: UNPAIRED}.get(ci.method, "n/a")


def interval_cell(ci: RatioCI) -> str:
    """`1.01–1.11` (`1.004–1.26`: a bound two decimals would round onto 1 keeps its third),
    or `n/a` when there is no bounded interval."""
    if not ci.bounded:
        return "n/a"
    return f"{ratios.ci_bound_text(ci.low)}–{ratios.ci_bound_text(ci.high)}"


def separation_cell(ci: RatioCI) -> str:
    """`separated`, `not separated: within ±4%` or `not separated: too few processes`."""
    if ci.separated:
        return "separated"
    if ci.bounded:
        return f"not separated: within \u00b1{ci.within:.0%}"
    return "not separated: too few processes"


# ------------------------------------------------------------------------------------------
# The tie rule.
# ------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Ranking:
    """Candidates with the leader first (`order`): the fastest by mean among those no other
    candidate is separated from and faster than, then the rest, the closest to the leader
    first. `tied` are the candidates the leader is not separated from (the leader itself
    first: one entry when it is separated from, and faster than, every other); `ci` is the
    leader over the runner-up, `order[1]` (None with one candidate)."""

    order: tuple[dict, ...]
    tied: tuple[dict, ...]
    ci: RatioCI | None

    @property
    def best(self) -> dict | None:
        """The one candidate a report may call fastest or best, or None for a tie."""
        return self.order[0] if self.order and len(self.tied) == 1 else None

    @property
    def top(self) -> dict | None:
        """The leader, separated or not (what the report describes further)."""
        return self.order[0] if self.order else None


def _or_inf(number: float) -> float:
    return number if math.isfinite(number) else math.inf


def _faster(ci: RatioCI) -> bool:
    """Whether the interval says the numerator is faster: it lies wholly above 1."""
    return ci.separated and ci.ratio > 1


def ranking(
    candidates: pd.DataFrame | Sequence[Mapping], runs: pd.DataFrame | None, value: str = MEAN
) -> Ranking:
    """The tie rule. A candidate may lead only where no other is separated from it and
    faster (a paired interval can rank two configurations against their means); the leader
    is the fastest such by `value`. It is best only where its interval against *every* other
    candidate excludes 1 on the faster side (`RatioCI.separated`), not only against the
    runner-up by mean; otherwise it is tied with each candidate it is not separated from.
    One process on either side gives no interval, so no separation."""
    rows = candidates.to_dict("records") if isinstance(candidates, pd.DataFrame) else candidates
    by_value = sorted(
        (dict(r) for r in rows if not missing(r.get(value))),
        key=lambda r: float(r[value]),
        reverse=True,
    )
    if len(by_value) < 2:
        return Ranking(tuple(by_value), tuple(by_value), None)
    rates = [process_rates(runs, candidate) for candidate in by_value]
    others = range(len(by_value))
    leader = next(
        (
            i
            for i in others
            if not any(j != i and _faster(ratio_of_rates(rates[j], rates[i])) for j in others)
        ),
        0,  # nobody is unbeaten (intervals need not be transitive): the highest mean leads
    )
    against = {j: ratio_of_rates(rates[leader], rates[j]) for j in others if j != leader}
    # Closest first; a ratio without processes behind it (NaN) keeps the order by value.
    rest = sorted(against, key=lambda j: (_or_inf(against[j].ratio), j))
    order = (by_value[leader], *(by_value[j] for j in rest))
    tied = (by_value[leader], *(by_value[j] for j in rest if not _faster(against[j])))
    return Ranking(order, tied, against[rest[0]])


def names(configs: Sequence[Mapping], name=config_text) -> str:
    """`a`, `a and b`, `a, b and c`."""
    texts = [name(c) for c in configs]
    return texts[0] if len(texts) == 1 else ", ".join(texts[:-1]) + " and " + texts[-1]


def tie_text(ranking: Ranking, name=config_text) -> str:
    """`a and b are tied (no difference detectable: within ±4% (1.02x, 95% CI 0.98-1.06))`:
    what a report says where the tie rule names no best."""
    return f"{names(ranking.tied, name)} are tied ({ratios.ratio_text(ranking.ci)})"


# ------------------------------------------------------------------------------------------
# summary.csv's interval columns.
# ------------------------------------------------------------------------------------------
CI_SUFFIXES = ("_ci_low", "_ci_high", "_method", "_separated")


def speedup_columns(
    summary: pd.DataFrame, runs: pd.DataFrame | None, fixed: str, value: str, prefix: str
) -> pd.DataFrame:
    """`prefix` and `prefix`_ci_low/_ci_high/_method/_separated for each row of `summary`:
    its throughput over its counterpart's with `fixed` set to `value`, the ratio being the
    interval's own estimate (paired rounds: the geometric mean of the per-round ratios;
    apart: the ratio of the means), so a speedup never lies outside its own interval.
    Where no processes are found (a summary without runs) the ratio is that of the means
    with no interval; empty where there is no counterpart or no measurement, and 1 for the
    reference itself."""
    keys = [k for k in COMPARE_KEYS if k in summary.columns]
    means = {
        tuple(_value(record[k]) for k in keys): record.get(MEAN)
        for record in summary.to_dict("records")
    }
    rows = []
    for record in summary.to_dict("records"):
        reference = {**{k: record[k] for k in keys}, fixed: value}
        reference_mean = means.get(tuple(_value(reference[k]) for k in keys))
        if missing(record.get(MEAN)) or missing(reference_mean):
            rows.append((None, None, None, None, None))
            continue
        if _value(record[fixed]) == _value(value):
            rows.append((1.0, None, None, None, None))
            continue
        ci = ratio_between(runs, record, reference)
        if not math.isfinite(ci.ratio):
            rows.append((float(record[MEAN]) / float(reference_mean), None, None, None, None))
            continue
        rows.append((ci.ratio, ci.low, ci.high, method_label(ci), ci.separated))
    return pd.DataFrame(
        rows, columns=[prefix, *(prefix + s for s in CI_SUFFIXES)], index=summary.index
    )


# ------------------------------------------------------------------------------------------
# A ratio in a table row and in a sentence.
# ------------------------------------------------------------------------------------------
def ci_from(row: Mapping, prefix: str) -> RatioCI:
    """The RatioCI a table row holds under `prefix` (`RatioCI.as_dict`'s columns)."""

    def number(name):
        value = row.get(f"{prefix}{name}")
        return None if missing(value) else float(value)

    ratio = number("")
    method = row.get(f"{prefix}_method")
    n = number("_n")
    return RatioCI(
        math.nan if ratio is None else ratio,
        number("_ci_low"),
        number("_ci_high"),
        None if missing(method) else str(method),
        0 if n is None else int(n),
    )


def with_mean_ratio(ci: RatioCI, mean_ratio: float) -> RatioCI:
    """`ci`, or, where no process was found (a results folder without runs.csv), the ratio of
    the means with no interval (n 0)."""
    if math.isfinite(ci.ratio) or missing(mean_ratio):
        return ci
    return RatioCI(float(mean_ratio), None, None, None, 0)


def describe(ci: RatioCI, what: str = "faster") -> str:
    """`ratios.ratio_text`, and for a ratio of means without processes behind it (n 0) why
    it has no interval."""
    if ci.n == 0 and math.isfinite(ci.ratio):
        return f"{ci.ratio:.2f}x, not separated (no per-process throughputs for a 95% CI)"
    return ratios.ratio_text(ci, what)
