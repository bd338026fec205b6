"""Ratios between configurations with their 95% intervals, the tie rule, and comparisons.csv.

Every comparison the report states (precision, variant, batch size, machine, time to
accuracy) is built here from runs.csv's per-process throughputs with `nnperf.core.ratios`:
**paired** by `round` where both configurations were interleaved in one job (the same
`group`) and share two rounds or more (on the rounds they shared a process in, where there
are enough: `ratios.pairing_rounds`), **unpaired** (Fieller) otherwise. `ranking` is the one
tie rule of the report; `comparisons_table` writes comparisons.csv in codes and numbers, the
table the Speedups section and figure read (`results.write_comparisons` is the file edge).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from nnperf.core import layout, ratios
from nnperf.core.ratios import RatioCI
from nnperf.core.vocab import CONFIG_KEYS, REFERENCE_PRECISION, REFERENCE_VARIANT
from nnperf.core.wording import missing
from nnperf.report import noise
from nnperf.report.format import GROUP_KEYS, MEAN, config_text, ok_configs

RATE = noise.RATE
PROCESS_FIELDS = ["rate", "round", "group", "shared_with", "member"]


def _value(value) -> str:
    """A key's value as text, so 64, 64.0 and "64" (read back from CSV) match."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def process_rates(runs: pd.DataFrame | None, config: Mapping) -> pd.DataFrame:
    """The measured worker processes of `config` in `runs` (`group` None before interleaving,
    `member` its name in its group). Keys `runs` lacks (`machine` in aggregate's) match all."""
    if runs is None or runs.empty or RATE not in runs.columns:
        return pd.DataFrame(columns=PROCESS_FIELDS)
    match = runs["status"].astype(str).eq("ok") if "status" in runs else runs[RATE].notna()
    for key in ("machine", *CONFIG_KEYS):
        if key in config and key in runs.columns:
            match &= runs[key].map(_value) == _value(config[key])
    chosen = runs.loc[match].reindex(columns=[RATE, "round", "group", "shared_with"])
    groups = [str(g) for g in chosen["group"] if not missing(g) and g != ""]
    precision, variant = config.get("precision"), config.get("variant")
    member = layout.member_name(precision, variant)
    if groups:
        member = layout.name_in_group(groups[0], precision, config.get("batch_size"), variant)
    chosen = chosen.reset_index(drop=True).assign(
        rate=pd.to_numeric(chosen[RATE], errors="coerce").to_numpy(),
        round=pd.to_numeric(chosen["round"], errors="coerce").to_numpy(),
        group=[None if missing(g) or g == "" else str(g) for g in chosen["group"]],
        shared_with=[
            [] if missing(s) or s == "" else str(s).split("|") for s in chosen["shared_with"]
        ],
        member=member,
    )[PROCESS_FIELDS]
    chosen = chosen[np.isfinite(chosen["rate"]) & (chosen["rate"] > 0)]
    return chosen.astype({"rate": float}).reset_index(drop=True)


def rates_by_round(rates: pd.DataFrame) -> pd.Series:
    """Mean rate per round: a round run twice in one configuration is averaged."""
    return rates.dropna(subset=["round"]).groupby("round")["rate"].mean()


def partners_by_round(rates: pd.DataFrame) -> dict[int, set[str]]:
    """The members each round's process was shared with (`process_rates`)."""
    found: dict[int, set[str]] = {}
    for row in rates.dropna(subset=["round"]).itertuples():
        found.setdefault(int(row.round), set()).update(row.shared_with)
    return found


def pairing(a: pd.DataFrame, b: pd.DataFrame) -> tuple[pd.DataFrame, str] | None:
    """A's and B's rates in the rounds they are paired on (columns a, b) and the pairs'
    grain (`ratios.pairing_rounds`); None where they cannot be paired: not interleaved in
    one group, or fewer than `ratios.MIN_PAIRS` rounds in common."""
    groups = {frozenset(rates["group"].dropna()) for rates in (a, b)}
    if len(groups) != 1 or len(next(iter(groups))) != 1:
        return None
    names = [str(rates["member"].iloc[0]) if len(rates) else "" for rates in (a, b)]
    rounds, grain = ratios.pairing_rounds(partners_by_round(a), partners_by_round(b), *names)
    if len(rounds) < ratios.MIN_PAIRS:
        return None
    pairs = pd.concat([rates_by_round(a), rates_by_round(b)], axis=1, keys=["a", "b"])
    return pairs.loc[rounds].astype(float), grain


def ratio_of_rates(a: pd.DataFrame, b: pd.DataFrame) -> RatioCI:
    """A over B from their `process_rates`: paired (`pairing`) where they can be, else
    unpaired (Fieller)."""
    if (paired := pairing(a, b)) is not None:
        return ratios.paired_ratio(paired[0]["a"].tolist(), paired[0]["b"].tolist())
    return ratios.unpaired_ratio(a["rate"].tolist(), b["rate"].tolist())


def ratio_between(runs: pd.DataFrame | None, a: Mapping, b: Mapping) -> RatioCI:
    """Throughput of configuration `a` over `b`'s (above 1: `a` is faster), with its interval."""
    return ratio_of_rates(process_rates(runs, a), process_rates(runs, b))


def interval_cell(ci: RatioCI) -> str:
    """`1.01–1.11` (a bound two decimals would round onto 1 keeps a third), or `n/a`."""
    if not ci.bounded:
        return "n/a"
    return f"{ratios.ci_bound_text(ci.low)}–{ratios.ci_bound_text(ci.high)}"


@dataclasses.dataclass(frozen=True)
class Ranking:
    """Candidates, the leader first (`order`), then the rest closest first; `tied`: those the
    leader is not separated from (the leader first); `ci`: leader over `order[1]`."""

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


def _faster(ci: RatioCI) -> bool:
    """Whether the interval says the numerator is faster: it lies wholly above 1."""
    return ci.separated and ci.ratio > 1


def ranking(candidates: pd.DataFrame | Sequence[Mapping], runs: pd.DataFrame | None) -> Ranking:
    """The tie rule. The leader is the fastest by its mean among the candidates no other is
    separated from and faster than (a paired interval can rank against the means). It is
    best only where its interval against *every* other excludes 1 on the faster side, not
    only against the runner-up; otherwise it ties with each it is not separated from."""
    rows = candidates.to_dict("records") if isinstance(candidates, pd.DataFrame) else candidates
    by_mean = [dict(r) for r in rows if not missing(r.get(MEAN))]
    by_mean.sort(key=lambda r: float(r[MEAN]), reverse=True)
    if len(by_mean) < 2:
        return Ranking(tuple(by_mean), tuple(by_mean), None)
    rates = [process_rates(runs, candidate) for candidate in by_mean]
    others = range(len(by_mean))

    def beaten(i: int) -> bool:
        return any(j != i and _faster(ratio_of_rates(rates[j], rates[i])) for j in others)

    # Nobody is unbeaten (intervals need not be transitive): the highest mean leads.
    leader = next((i for i in others if not beaten(i)), 0)
    against = {j: ratio_of_rates(rates[leader], rates[j]) for j in others if j != leader}
    # Closest first; a ratio without processes behind it (NaN) keeps the order by mean.
    ratio = {j: ci.ratio if math.isfinite(ci.ratio) else math.inf for j, ci in against.items()}
    rest = sorted(against, key=lambda j: (ratio[j], j))
    order = (by_mean[leader], *(by_mean[j] for j in rest))
    tied = (by_mean[leader], *(by_mean[j] for j in rest if not _faster(against[j])))
    return Ranking(order, tied, against[rest[0]])


def names(configs: Sequence[Mapping], name=config_text) -> str:
    """`a`, `a and b`, `a, b and c`."""
    texts = [name(c) for c in configs]
    return texts[0] if len(texts) == 1 else ", ".join(texts[:-1]) + " and " + texts[-1]


# comparisons.csv: one row per ratio the report states, how many times faster A is than B
# (throughput A/B, or time to accuracy B/A). `pair`: B the reference precision or variant
# (`vs_reference`), A its group's leader by the tie rule and B each other (`top_vs_other`),
# A the largest batch and B the smallest (`largest_vs_smallest`).
KINDS = ("precision", "variant", "batch", "machine", "time_to_accuracy")
# `verdict`: `RatioCI.verdict`'s codes (faster, slower, tie within the CI target, unresolved,
# no_ci), out_of_reach (unresolved, and the engine gave it up: the rounds its members' budgets
# fit could not resolve it), or not_reached (B never reached the target accuracy).
RATIO_COLUMNS = (
    *("ratio", "ci95_low", "ci95_high", "method", "grain", "verdict", "rounds", "ci_target"),
)
A_B = (*(f"a_{k}" for k in GROUP_KEYS), *(f"b_{k}" for k in GROUP_KEYS))
COLUMNS = ("kind", "pair", *A_B, "recipe", "quantity", "a_value", "b_value", *RATIO_COLUMNS)
# `method`: paired by round, unpaired (Fieller), `means` (no processes at hand: the ratio of
# the means, no interval), `single` (one training run each). `grain`, of a paired one: its
# rounds' processes were shared, windows taking turns (`window`), or each its own (`process`).
METHODS = {ratios.PAIRED: "paired", ratios.FIELLER: "unpaired"}


def _pair(kind: str, pair: str, a: Mapping, b: Mapping, **numbers) -> dict:
    sides = {f"{side}_{k}": row.get(k) for side, row in (("a", a), ("b", b)) for k in GROUP_KEYS}
    return {"kind": kind, "pair": pair, **sides, **numbers}


def _throughput_row(kind: str, pair: str, a: Mapping, b: Mapping, runs) -> dict:
    """A over B in throughput, with the interval from their processes (`ratio_between`)."""
    rates = process_rates(runs, a), process_rates(runs, b)
    ci, paired = ratio_of_rates(*rates), pairing(*rates)
    method = METHODS.get(ci.method)
    if not math.isfinite(ci.ratio):
        ci, method = RatioCI(float(a[MEAN]) / float(b[MEAN]), None, None, None, 0), "means"
    # "No difference" for a pair: the stricter of the two CI targets (as
    # `nnperf.engine.interleave.tolerance`), else the fallback.
    known = [float(r["ci_target"]) for r in (a, b) if not missing(r.get("ci_target"))]
    target = min([t for t in known if t > 0], default=noise.FALLBACK_TARGET)
    numbers = dict(quantity=RATE, a_value=float(a[MEAN]), b_value=float(b[MEAN]), ratio=ci.ratio)
    verdict = ci.verdict(target)
    # Where the engine gave up A's comparison with B, its group partner (summary.csv
    # `comparisons_out_of_reach`, `nnperf.engine.interleave.out_of_reach_with`): B named as
    # in a group of one batch size, or of several.
    codes = a.get("comparisons_out_of_reach")
    given_up = set() if missing(codes) else set(str(codes).split("|"))
    b_keys = b.get("precision"), b.get("variant")
    b_names = {layout.member_name(*b_keys), layout.member_name(*b_keys, b["batch_size"])}
    if verdict == "unresolved" and not given_up.isdisjoint(b_names):
        verdict = ratios.OUT_OF_REACH
    grain = paired[1] if paired is not None and method == "paired" else None
    numbers.update(ci95_low=ci.low, ci95_high=ci.high, method=method, grain=grain, verdict=verdict)
    return _pair(kind, pair, a, b, **numbers, rounds=ci.n, ci_target=target)


def _against_reference(ok: pd.DataFrame, runs, column: str, reference: str) -> list[dict]:
    """Each configuration against its counterpart with `column` = `reference`."""

    def key(row: Mapping) -> tuple:
        return tuple(_value(row[k]) for k in GROUP_KEYS if k != column)

    is_reference = ok[column].astype(str) == reference
    references = {key(b): b for b in ok[is_reference].to_dict("records")}
    pairs = [(a, references.get(key(a))) for a in ok[~is_reference].to_dict("records")]
    return [_throughput_row(column, "vs_reference", a, b, runs) for a, b in pairs if b is not None]


def _across(ok: pd.DataFrame, runs, kind: str, column: str, keys: Sequence[str]) -> list[dict]:
    """Within each group of `keys` that varies `column`: the leader by the tie rule against
    every other member, and for batch sizes the largest against the smallest."""
    rows = []
    for _, group in ok.groupby(list(keys), sort=True, dropna=False):
        if group[column].nunique() < 2:
            continue
        ranked = ranking(group, runs)
        rows += [
            _throughput_row(kind, "top_vs_other", ranked.order[0], b, runs)
            for b in ranked.order[1:]
        ]
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
    frame = training.assign(
        machine=training.get("machine", ""),
        time_to_target_s=pd.to_numeric(training["time_to_target_s"], errors="coerce"),
    )
    rows = []
    for _, group in frame.groupby(["machine", "device", "model", "recipe"], sort=True):
        first, *others = group.sort_values("time_to_target_s").to_dict("records")
        a_time = first["time_to_target_s"]
        for b in others if not missing(a_time) else []:
            ratio = b["time_to_target_s"] / a_time  # NaN where B never reached it
            numbers = dict(recipe=first["recipe"], quantity="time_to_target_s", a_value=a_time)
            numbers.update(b_value=None if math.isnan(ratio) else b["time_to_target_s"])
            verdict = "not_reached" if math.isnan(ratio) else "faster" if ratio > 1 else "tie"
            numbers.update(ratio=ratio, method="single", verdict=verdict, rounds=1)
            rows.append(_pair("time_to_accuracy", "top_vs_other", first, b, **numbers))
    return rows


def comparisons_table(
    summary: pd.DataFrame | None, runs: pd.DataFrame | None, training: pd.DataFrame | None = None
) -> pd.DataFrame:
    """comparisons.csv: each precision against fp32 and variant against the baseline, batch
    sizes and machines by the tie rule (and a group's largest batch against its smallest), and
    the first training run to reach its target against the others. Codes and numbers only."""
    ok = ok_configs(summary)
    if "machine" not in ok.columns or ok["machine"].isna().all():
        ok = ok.assign(machine="")
    rows = _against_reference(ok, runs, "precision", REFERENCE_PRECISION)
    rows += _against_reference(ok, runs, "variant", REFERENCE_VARIANT)
    rows += _across(ok, runs, "batch", "batch_size", [k for k in GROUP_KEYS if k != "batch_size"])
    rows += _across(ok, runs, "machine", "machine", ["model", "precision", "batch_size", "variant"])
    rows += _time_to_accuracy(training)
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    table["rounds"] = table["rounds"].astype("Int64")
    return table


def ci_of(row: Mapping) -> RatioCI:
    """The RatioCI a comparisons.csv row holds."""
    low, high, ratio, rounds = (
        None if missing(row.get(k)) else float(row[k])
        for k in ("ci95_low", "ci95_high", "ratio", "rounds")
    )
    method = {label: code for code, label in METHODS.items()}.get(row.get("method"))
    n = 0 if method is None or rounds is None else int(rounds)
    return RatioCI(math.nan if ratio is None else ratio, low, high, method, n)


def ratio_text(ci: RatioCI, what: str = "faster") -> str:
    """`ratios.ratio_text`, and for a ratio of means without processes behind it (n 0) why
    it has no interval."""
    if ci.n == 0 and math.isfinite(ci.ratio):
        return f"{ci.ratio:.2f}x, not separated (no per-process throughputs for a 95% CI)"
    return ratios.ratio_text(ci, what)
