"""Why a measurement was noisy: the likely causes of one configuration's spread, ranked.

A configuration that missed its CI target is read through what its windows recorded: each
cause (`CAUSE_NUMBERS`) is a test significant at `ALPHA`. Load too small to flag a window in
`nnperf.engine.stability` still shows here when it costs speed; process means split by a gap
are cuDNN choosing one of two algorithms per process. `shared_slowdown`, read from the
interleaved group, leads where found: the machine's capacity moved under every configuration
alike, which the paired comparisons cancel and a configuration's own CI cannot. Causes are
ranked by the share of the window variance each explains (r², eta²). Codes and numbers only:
`nnperf.report.wording.measurement` words them.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from nnperf.core import stats
from nnperf.core.wording import missing
from nnperf.core.vocab import DEFAULT_TARGET_CI, OVERLOAD_TOLERANCE_CORES, STEAL_LIMIT
from nnperf.engine.stopping import processes_for_spread
from nnperf.report.findings import Finding

RATE = "throughput_img_s"
# The numbers each cause quotes; summary.csv holds each as `{cause}_{number}`.
CAUSE_NUMBERS = {
    # r² and p of the regression on the group; the other configurations and shared rounds it
    # rests on; how far the group's slowest round fell under its median.
    "shared_slowdown": ("r2", "p", "configurations", "rounds", "dip"),
    # The change over the run, the fitted slope per minute (both relative to the start).
    "drift": ("change", "per_minute", "p"),
    # The peak of the covariate (cores, steal share), the windows past the stability
    # threshold and how much slower they ran than the rest.
    "host_load": ("r2", "p", "peak", "windows", "slower"),
    "steal": ("r2", "p", "peak", "windows", "slower"),
    # The SM clock's range where throughput follows it; else throttled windows' slowdown.
    "clock": ("r2", "p", "low_mhz", "high_mhz", "throttled", "slower"),
    "bimodal": ("low_n", "low_img_s", "high_n", "high_img_s", "gap"),
    "process_level": ("n", "p", "low_img_s", "high_img_s"),
    "window_noise": ("cv",),
}
# What the target would take: the process spread, the processes it needs, a process's cost.
TARGET_COLUMNS = ("process_rsd", "processes_needed", "process_cost_s")
NOISE_COLUMNS = (
    "noise_cause",
    "noise_causes",
    *(f"{code}_{name}" for code, names in CAUSE_NUMBERS.items() for name in names),
    *TARGET_COLUMNS,
)
# Significance level of every test: several causes are tested per configuration, so a
# stricter level than 5% keeps chance findings out of the report.
ALPHA = 0.01
# Drift counts when the change it makes over the run is at least this share of the target.
DRIFT_SHARE_OF_TARGET = 0.5
# A split of the process means counts when its gap is at least this share of the target.
SPLIT_SHARE_OF_TARGET = 0.5
# Target assumed where the document names none.
FALLBACK_TARGET = DEFAULT_TARGET_CI["cpu"]
# Fewest windows a regression is read from.
MIN_WINDOWS = 4


def cause(code: str, share: float, **numbers) -> Finding:
    """One likely cause (`findings.NOISE_CAUSES`) with its numbers and `share`, the share of
    the window variance it accounts for (what ranks it)."""
    return Finding(code, {}, {**numbers, "share": float(share)})


def _fit(x: pd.Series, y: pd.Series):
    """linregress of y on x where both are known and vary, else None."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    known = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[known], ys[known]
    if len(xs) < MIN_WINDOWS or np.ptp(xs) == 0 or np.ptp(ys) == 0:
        return None
    return scipy_stats.linregress(xs, ys)


def _minutes(frame: pd.DataFrame) -> pd.Series:
    return (frame["started_at_unix"] - frame["started_at_unix"].min()) / 60


def drift(frame: pd.DataFrame, target: float) -> Finding | None:
    """Throughput that moves with time, significantly and by at least
    `DRIFT_SHARE_OF_TARGET` of the target over the run. Significance is read from the windows
    within each process (centred on the process's means, one pooled slope) and from the
    process means against their mean time, not from every window on time: windows of one
    process are not independent, and one slow process would read as a trend."""
    minutes, rates, process = _minutes(frame), frame[RATE], frame["process"]
    if not np.isfinite(minutes.to_numpy(dtype=float)).any():
        return None
    within = _fit(*(s - s.groupby(process).transform("mean") for s in (minutes, rates)))
    means = frame.assign(_minutes=minutes).groupby("process")[["_minutes", RATE]].mean()
    between = _fit(means["_minutes"], means[RATE]) if len(means) >= 3 else None
    significant = [f.pvalue for f in (within, between) if f is not None and f.pvalue < ALPHA]
    fit = _fit(minutes, rates)
    if not significant or fit is None:
        return None
    # Relative to where the fitted line starts: "fell 9% over the run" reads from the start.
    per_minute = fit.slope / (float(rates.mean()) - fit.slope * float(minutes.mean()))
    change = per_minute * float(minutes.max())
    if abs(change) < DRIFT_SHARE_OF_TARGET * target:
        return None
    share = min(float((fit.slope * minutes).var() / rates.var()), 1.0)
    return cause("drift", share, change=change, per_minute=per_minute, p=min(significant))


def _slower_share(frame: pd.DataFrame, hit: pd.Series) -> float | None:
    """How much slower the windows in `hit` ran than the others (0.11: 11% slower)."""
    if not hit.any() or hit.all():
        return None
    return 1 - float(frame.loc[hit, RATE].mean()) / float(frame.loc[~hit, RATE].mean())


def _regression(code: str, fit, sign: int, **numbers) -> Finding | None:
    """Cause `code` where `fit` slopes the `sign` way (1 up, -1 down) at p < ALPHA, ranked by
    its r²."""
    if fit is None or fit.slope * sign <= 0 or fit.pvalue >= ALPHA:
        return None
    return cause(code, fit.rvalue**2, r2=fit.rvalue**2, p=fit.pvalue, **numbers)


def _falls_with(frame: pd.DataFrame, column: str, limit: float, code: str) -> Finding | None:
    """Throughput that falls as `column` rises, with the windows past `limit` (the stability
    threshold) compared with the rest."""
    hit = frame[column] > limit
    slower = _slower_share(frame, hit)
    fit, windows = _fit(frame[column], frame[RATE]), None if slower is None else int(hit.sum())
    peak = float(frame[column].max())
    return _regression(code, fit, -1, peak=peak, windows=windows, slower=slower)


def clock(frame: pd.DataFrame) -> Finding | None:
    """Throughput that follows the SM clock; or, at one clock, throttled windows slower."""
    clocks, throttled = frame["sm_clock_mhz"], int(frame["throttled"].sum())
    numbers = dict(low_mhz=float(clocks.min()), high_mhz=float(clocks.max()), throttled=throttled)
    found = _regression("clock", _fit(clocks, frame[RATE]), 1, **numbers)
    fit = _fit(frame["throttled"].astype(float), frame[RATE])
    if found is not None or fit is None or fit.slope >= 0 or fit.pvalue >= ALPHA:
        return found
    # A significant fit means some windows were throttled and some not: `slower` is a number.
    slower = _slower_share(frame, frame["throttled"])
    return cause("clock", fit.rvalue**2, p=fit.pvalue, throttled=throttled, slower=slower)


def _eta_squared(frame: pd.DataFrame, groups: pd.Series) -> float:
    """The share of the window throughputs' variance between `groups` (sum of squares)."""
    rates = frame[RATE]
    total = float(((rates - rates.mean()) ** 2).sum())
    means = rates.groupby(groups).transform("mean")
    return float(((means - rates.mean()) ** 2).sum()) / total if total > 0 else 0.0


def split(process_means: Sequence[float], target: float) -> tuple[list[float], list[float]] | None:
    """The process means split in two at their widest gap (two or more on each side), where
    the gap is wider than either side's range and `SPLIT_SHARE_OF_TARGET` of the target."""
    means = sorted(float(m) for m in process_means if np.isfinite(m))
    if len(means) < 4:
        return None
    cut = max(range(2, len(means) - 1), key=lambda i: means[i] - means[i - 1])
    low, high = means[:cut], means[cut:]
    gap = high[0] - low[-1]
    wide = gap > max(np.ptp(low), np.ptp(high))
    return (low, high) if wide and gap >= SPLIT_SHARE_OF_TARGET * target * np.mean(means) else None


def process_causes(frame: pd.DataFrame, target: float) -> list[Finding]:
    """A process level split in two (`split`), else processes that differ by more than
    their windows explain (one-way ANOVA), else nothing."""
    groups = [g[RATE].to_numpy() for _, g in frame.groupby("process")]
    if len(groups) < 2:
        return []
    means = frame.groupby("process")[RATE].mean()
    halves = split(means.tolist(), target)
    if halves is not None:
        low, high = halves
        share = _eta_squared(frame, frame["process"].map(means >= high[0]))
        numbers = dict(low_n=len(low), low_img_s=float(np.mean(low)), high_n=len(high))
        numbers.update(high_img_s=float(np.mean(high)), gap=high[0] / low[-1] - 1)
        return [cause("bimodal", share, **numbers)]
    if any(len(g) < 2 for g in groups):
        return []
    result = scipy_stats.f_oneway(*groups)
    if not result.pvalue < ALPHA:
        return []
    share = _eta_squared(frame, frame["process"])
    numbers = dict(n=len(groups), low_img_s=float(means.min()), high_img_s=float(means.max()))
    return [cause("process_level", share, p=float(result.pvalue), **numbers)]


def causes(windows: Sequence[Mapping], target: float | None = None) -> list[Finding]:
    """Every likely cause of the windows' spread, the one accounting for most first; window
    noise when no external cause is found; `none` when there are no windows to read."""
    # The windows with a positive throughput, as numbers; `throttled`: a throttle reason.
    frame = pd.DataFrame(list(windows))
    for name in (RATE, "started_at_unix", "other_cores", "steal_share", "sm_clock_mhz"):
        frame[name] = pd.to_numeric(frame[name], errors="coerce") if name in frame else np.nan
    reasons = frame.get("throttle_reasons", pd.Series(None, index=frame.index))
    frame["throttled"] = reasons.map(lambda t: isinstance(t, str) and bool(t.strip()))
    frame = frame[np.isfinite(frame[RATE]) & (frame[RATE] > 0)].reset_index(drop=True)
    target = FALLBACK_TARGET if target is None or not target > 0 else float(target)
    if len(frame) < 2:
        return [cause("none", 0.0)]
    trend = drift(frame, target)
    host = _falls_with(frame, "other_cores", OVERLOAD_TOLERANCE_CORES, "host_load")
    steal = _falls_with(frame, "steal_share", STEAL_LIMIT, "steal")
    found = [c for c in (trend, host, steal, clock(frame)) if c is not None]
    # With the drift taken out, so a trend is not read a second time as processes that differ.
    detrended = frame
    if trend is not None:
        minutes = _minutes(frame)
        slope = _fit(minutes, frame[RATE]).slope
        detrended = frame.assign(**{RATE: frame[RATE] - slope * (minutes - minutes.mean())})
    found += process_causes(detrended, target)
    if not found:
        # The pooled CV of the windows, each relative to its process's mean.
        relative = frame[RATE] / frame.groupby("process")[RATE].transform("mean")
        found.append(cause("window_noise", 0.0, cv=stats.coefficient_of_variation(relative)))
    return sorted(found, key=lambda c: -c.numbers["share"])


def shared_slowdown(
    own: Mapping[int, float], others: Sequence[Mapping[int, float]]
) -> Finding | None:
    """Process throughputs (`own`, by round) that follow the other configurations measured in
    the same rounds (`others`, round -> rate each), a regression of log rates. Each is taken
    relative to its own mean, so configurations of different speeds compare."""
    table = pd.DataFrame(
        {i: pd.Series(r, dtype=float) for i, r in enumerate(others) if len(r) >= 2}
    )
    if table.empty:
        return None
    group = (table / table.mean()).mean(axis=1)
    rounds = sorted(r for r in own if r in group.index)
    group, mine = group[rounds], pd.Series(own, dtype=float)[rounds]
    numbers = dict(configurations=table.shape[1], rounds=len(rounds))
    numbers["dip"] = 1 - float(group.min() / group.median())
    return _regression("shared_slowdown", _fit(np.log(group), np.log(mine)), 1, **numbers)


def cause_columns(found: Finding) -> dict:
    """One cause's numbers as summary.csv's `{cause}_{number}` columns."""
    return {f"{found.kind}_{n}": found.numbers.get(n) for n in CAUSE_NUMBERS.get(found.kind, ())}


def with_shared_slowdown(columns: Mapping, found: Finding | None) -> dict:
    """summary.csv's noise columns with a shared slowdown first (it explains the process level
    the windows' causes name)."""
    noise = {name: columns.get(name) for name in NOISE_COLUMNS}
    if found is None or missing(columns.get("noise_cause")):
        return noise
    ranked = [found.kind, *str(columns.get("noise_causes") or "").split(";")]
    noise.update(noise_cause=found.kind, noise_causes=";".join(c for c in ranked if c))
    return {**noise, **cause_columns(found)}


def target_columns(process_rates: Sequence[float], target: float | None) -> dict:
    """What the target would take: the processes' spread (RSD) and the processes
    (`processes_for_spread`) it needs at that spread; None where fewer than two measured."""
    rates = [float(r) for r in process_rates if r is not None and np.isfinite(float(r))]
    if target is None or not target > 0 or len(rates) < 2:
        return {"process_rsd": None, "processes_needed": None}
    mean, spread = float(np.mean(rates)), float(np.std(rates, ddof=1))
    needed = processes_for_spread(spread, mean, target)
    return {"process_rsd": spread / mean, "processes_needed": needed}


def noise_columns(document: Mapping) -> dict:
    """summary.csv's noise columns for a run that measured and missed its CI target: the top
    cause, every cause ranked (`;`-joined), their numbers and what the target would take
    (with a process's median cost, start to end); all None otherwise."""
    columns = dict.fromkeys(NOISE_COLUMNS)
    if document.get("status") != "ok" or document.get("ci_target_met") is not False:
        return columns
    target = (document.get("timing") or {}).get("target_ci")
    processes = pd.DataFrame(
        document.get("processes") or [], columns=[RATE, "started_at_unix", "ended_at_unix"]
    ).apply(pd.to_numeric, errors="coerce")
    found = causes(document.get("windows") or [], target)
    columns.update(noise_cause=found[0].kind, noise_causes=";".join(c.kind for c in found))
    for c in found:
        columns.update(cause_columns(c))
    spans = (processes["ended_at_unix"] - processes["started_at_unix"]).dropna()
    columns.update(target_columns(processes[RATE].dropna().tolist(), target))
    columns["process_cost_s"] = float(spans.median()) if len(spans) else None
    return columns


def spread_columns(windows: Sequence[Mapping]) -> dict:
    """pyperf's spread of the window throughputs: min, max and the windows outside Tukey's
    fences (1.5 IQR beyond the quartiles, `stats.tukey_outliers`): how many and which
    (`p1w3`: process 1's window 3)."""
    rated = [w for w in windows if w.get(RATE) is not None]
    rates = [float(w[RATE]) for w in rated]
    finite = [r for r in rates if np.isfinite(r)]
    outliers = stats.tukey_outliers(rates)
    return {
        "throughput_img_s_min": min(finite) if finite else None,
        "throughput_img_s_max": max(finite) if finite else None,
        "outliers": len(outliers) if finite else None,
        "outlier_windows": ", ".join(
            f"p{rated[i].get('process')}w{rated[i].get('window')}" for i in outliers
        ),
    }
