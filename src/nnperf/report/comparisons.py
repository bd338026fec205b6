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
* `comparisons_table(summary, runs, training)`: comparisons.csv, one row per ratio the report
  states, in codes and numbers (`COLUMNS`); the Speedups section and figure read only it.

Data in, data out (`results.write_comparisons` is the edge of rule `comparisons_table`). The
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
from nnperf.core.vocab import CONFIG_KEYS, REFERENCE_PRECISION, REFERENCE_VARIANT
from nnperf.core.wording import missing
from nnperf.report import noise
from nnperf.report.configurations import MEAN, ok_configs
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


def interval_cell(ci: RatioCI) -> str:
    """`1.01–1.11` (`1.004–1.26`: a bound two decimals would round onto 1 keeps its third),
    or `n/a` when there is no bounded interval."""
    if not ci.bounded:
        return "n/a"
    return f"{ratios.ci_bound_text(ci.low)}–{ratios.ci_bound_text(ci.high)}"


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
    """`a and b are not separated (1.02x, 95% CI 0.98-1.06)`: what a report says where the
    tie rule names no best."""
    return f"{names(ranking.tied, name)} are {ratios.ratio_text(ranking.ci)}"


# ------------------------------------------------------------------------------------------
# comparisons.csv: one row per ratio the report states.
# ------------------------------------------------------------------------------------------
KINDS = ("precision", "variant", "batch", "machine", "time_to_accuracy")
PAIR_KEYS = ("machine", "device", "model", "precision", "batch_size", "variant")
# What A and B of a row are: B the reference precision or variant (`vs_reference`), A the
# leader of its group by the tie rule and B each other member (`top_vs_other`), A the
# largest batch size and B the smallest (`largest_vs_smallest`).
PAIRS = ("vs_reference", "top_vs_other", "largest_vs_smallest")
# How many times faster A is than B: throughput A/B, or time to accuracy B/A.
COLUMNS = (
    "kind",
    "pair",
    *(f"a_{k}" for k in PAIR_KEYS),
    *(f"b_{k}" for k in PAIR_KEYS),
    "recipe",
    "quantity",
    "a_value",
    "b_value",
    "ratio",
    "ci95_low",
    "ci95_high",
    "method",
    "verdict",
    "rounds",
    "ci_target",
)
# `method`: paired by round, unpaired (Fieller), `means` (no processes at hand: the ratio of
# the means, no interval), `single` (one training run each).
METHODS = {ratios.PAIRED: "paired", ratios.FIELLER: UNPAIRED}
# `verdict`: faster/slower (the interval excludes 1), tie (within the CI target of 1),
# unresolved (includes 1 but wider than the target), no_ci (too few processes),
# not_reached (B never reached the target accuracy).
VERDICTS = ("faster", "slower", "tie", "unresolved", "no_ci", "not_reached")


def verdict(ci: RatioCI, target: float) -> str:
    """The row's `verdict` code for `ci` against the CI target `target` (`RatioCI.verdict`,
    the engine's own rule)."""
    return ci.verdict(target)


def _target(a: Mapping, b: Mapping) -> float:
    """What counts as "no difference" for a pair: the stricter of the two CI targets
    (`nnperf.engine.interleave.tolerance`), the fallback where summary.csv has none."""
    known = [float(r["ci_target"]) for r in (a, b) if not missing(r.get("ci_target"))]
    known = [t for t in known if t > 0]
    return min(known) if known else noise.FALLBACK_TARGET


def _keys(prefix: str, config: Mapping) -> dict:
    return {f"{prefix}{k}": config.get(k) for k in PAIR_KEYS}


def _throughput_row(kind: str, pair: str, a: Mapping, b: Mapping, runs) -> dict:
    """A over B in throughput, with the interval from their processes (`ratio_between`)."""
    ci = ratio_between(runs, a, b)
    method = METHODS.get(ci.method)
    if not math.isfinite(ci.ratio):
        ci, method = RatioCI(float(a[MEAN]) / float(b[MEAN]), None, None, None, 0), "means"
    target = _target(a, b)
    return {
        "kind": kind,
        "pair": pair,
        **_keys("a_", a),
        **_keys("b_", b),
        "quantity": RATE,
        "a_value": float(a[MEAN]),
        "b_value": float(b[MEAN]),
        "ratio": ci.ratio,
        "ci95_low": ci.low,
        "ci95_high": ci.high,
        "method": method,
        "verdict": verdict(ci, target),
        "rounds": ci.n,
        "ci_target": target,
    }


def _against_reference(ok: pd.DataFrame, runs, column: str, reference: str) -> list[dict]:
    """Each configuration against its counterpart with `column` = `reference`."""
    match = [k for k in PAIR_KEYS if k != column]
    references = {
        tuple(_value(r[k]) for k in match): r
        for r in ok[ok[column].astype(str) == reference].to_dict("records")
    }
    rows = []
    for row in ok[ok[column].astype(str) != reference].to_dict("records"):
        found = references.get(tuple(_value(row[k]) for k in match))
        if found is not None:
            rows.append(_throughput_row(column, "vs_reference", row, found, runs))
    return rows


def _across(ok: pd.DataFrame, runs, kind: str, column: str, keys: Sequence[str]) -> list[dict]:
    """Within each group of `keys` that varies `column`: the leader by the tie rule
    (`ranking`) against every other member, and for batch sizes the largest against the
    smallest."""
    rows = []
    for _, group in ok.groupby(list(keys), sort=True, dropna=False):
        if group[column].nunique() < 2:
            continue
        ranked = ranking(group, runs)
        top = ranked.order[0]
        rows += [_throughput_row(kind, "top_vs_other", top, b, runs) for b in ranked.order[1:]]
        if kind == "batch":
            by_batch = group.sort_values("batch_size").to_dict("records")
            rows.append(
                _throughput_row(kind, "largest_vs_smallest", by_batch[-1], by_batch[0], runs)
            )
    return rows


def _time_to_accuracy(training: pd.DataFrame | None) -> list[dict]:
    """Per (machine, device, model, recipe): the first run to reach its target against every
    other run (one training run each: no interval)."""
    if training is None or training.empty or "time_to_target_s" not in training.columns:
        return []
    frame = training.assign(machine=training.get("machine", ""))
    frame["time_to_target_s"] = pd.to_numeric(frame["time_to_target_s"], errors="coerce")
    rows = []
    for _, group in frame.groupby(["machine", "device", "model", "recipe"], sort=True):
        records = group.sort_values("time_to_target_s").to_dict("records")
        first = records[0]
        if len(records) < 2 or missing(first["time_to_target_s"]):
            continue
        for b in records[1:]:
            time_b = b["time_to_target_s"]
            ratio = (
                math.nan if missing(time_b) else float(time_b) / float(first["time_to_target_s"])
            )
            rows.append(
                {
                    "kind": "time_to_accuracy",
                    "pair": "top_vs_other",
                    **_keys("a_", first),
                    **_keys("b_", b),
                    "recipe": first["recipe"],
                    "quantity": "time_to_target_s",
                    "a_value": float(first["time_to_target_s"]),
                    "b_value": None if missing(time_b) else float(time_b),
                    "ratio": ratio,
                    "method": "single",
                    "verdict": (
                        "not_reached" if missing(time_b) else ("faster" if ratio > 1 else "tie")
                    ),
                    "rounds": 1,
                }
            )
    return rows


def comparisons_table(
    summary: pd.DataFrame | None,
    runs: pd.DataFrame | None,
    training: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """comparisons.csv: every precision against fp32 and variant against the baseline at the
    same batch size, each batch-size group's leader against the rest and its largest batch
    against its smallest, each configuration's fastest machine against the others (every
    configuration several machines ran: `sections.machines_compared` says why), and the first training run to reach its target against the
    others. Codes and numbers only; the sections word them."""
    ok = ok_configs(summary)
    if "machine" not in ok.columns or ok["machine"].isna().all():
        ok = ok.assign(machine="")
    rows = _against_reference(ok, runs, "precision", REFERENCE_PRECISION)
    rows += _against_reference(ok, runs, "variant", REFERENCE_VARIANT)
    within = [k for k in PAIR_KEYS if k != "batch_size"]
    rows += _across(ok, runs, "batch", "batch_size", within)
    across_machines = ["model", "precision", "batch_size", "variant"]
    rows += _across(ok, runs, "machine", "machine", across_machines)
    rows += _time_to_accuracy(training)
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    table["rounds"] = table["rounds"].astype("Int64")
    return table


# ------------------------------------------------------------------------------------------
# A ratio in a table row and in a sentence.
# ------------------------------------------------------------------------------------------
def ci_of(row: Mapping) -> RatioCI:
    """The RatioCI a comparisons.csv row holds."""

    def number(name):
        return None if missing(row.get(name)) else float(row[name])

    method = {label: code for code, label in METHODS.items()}.get(row.get("method"))
    rounds = number("rounds")
    ratio = number("ratio")
    return RatioCI(
        math.nan if ratio is None else ratio,
        number("ci95_low"),
        number("ci95_high"),
        method,
        0 if method is None or rounds is None else int(rounds),
    )


def ratio_text(ci: RatioCI, what: str = "faster") -> str:
    """`ratios.ratio_text`, and for a ratio of means without processes behind it (n 0) why
    it has no interval."""
    if ci.n == 0 and math.isfinite(ci.ratio):
        return f"{ci.ratio:.2f}x, not separated (no per-process throughputs for a 95% CI)"
    return ratios.ratio_text(ci, what)
