"""Why a measurement was noisy: the likely causes of one configuration's spread, ranked.

A configuration that missed its CI target (`ci_target_met` false) is read through what its
windows recorded (`vocab.WINDOW_CSV_COLUMNS`). Each cause is a test on that record, found
as a `Finding` with its numbers (`CAUSE_NUMBERS`), significant at `ALPHA`:

* `drift`: throughput against time (`linregress`), by at least `DRIFT_SHARE_OF_TARGET` of
  the target over the run (a machine warming up, a cache filling, a neighbour arriving).
* `host_load`, `steal`, `clock`: throughput that falls with other processes' cores, with
  the hypervisor's steal, or follows the SM clock (throttled windows at one clock); load
  too small to flag a window (`nnperf.engine.stability`) still shows when it costs speed.
* `bimodal`: sorted process means split by a gap wider than either side's range (cuDNN
  choosing one of two algorithms per process); else `process_level`: processes that differ
  by more than their windows explain (one-way ANOVA); else `window_noise`.
* `shared_slowdown` (`shared_slowdown()`), read from the group: interleaved, when a
  configuration's processes rise and fall round by round with the other configurations'
  (a regression of log rates), the machine's capacity changed under all of them; the
  paired comparisons cancel it, a configuration's own CI cannot. It leads where found.

Causes are ranked by the share of the window variance each accounts for (r², eta²). What
the target would take comes last: the processes it needs at the measured process spread
(`nnperf.engine.stopping.processes_for_spread`) and a process's cost. `noise_columns()` gives
summary.csv's `noise_cause`, the ranked `noise_causes` and each cause's numbers as
`{cause}_{number}` columns: codes and numbers; `nnperf.report.wording.noise` words them.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from nnperf.core import stats
from nnperf.core.wording import missing
from nnperf.core.vocab import OVERLOAD_TOLERANCE_CORES, STEAL_LIMIT
from nnperf.engine.stopping import processes_for_spread
from nnperf.report.findings import Finding
from nnperf.report.format import fmt_pct

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
# Target assumed where the document names none (the CPU default, vocab.DEFAULT_TARGET_CI).
FALLBACK_TARGET = 0.03
# Fewest windows a regression is read from.
MIN_WINDOWS = 4


def cause(code: str, share: float, **numbers) -> Finding:
    """One likely cause: its code (`findings.NOISE_CAUSES`), its numbers (`CAUSE_NUMBERS`) and `share`, the
    share of the window variance it accounts for (what ranks it)."""
    return Finding(code, {}, {**numbers, "share": float(share)})


def window_frame(windows: Sequence[Mapping]) -> pd.DataFrame:
    """The windows as numbers (throughput, time, covariates), those without a throughput
    left out; `throttled` is whether the window recorded a throttle reason."""
    frame = pd.DataFrame(list(windows))
    if frame.empty or "throughput_img_s" not in frame:
        return pd.DataFrame(columns=["process", "window", "throughput_img_s"])
    numeric = ("throughput_img_s", "started_at_unix", "other_cores", "steal_share", "sm_clock_mhz")
    for name in numeric:
        frame[name] = pd.to_numeric(frame[name], errors="coerce") if name in frame else np.nan
    throttle = frame["throttle_reasons"] if "throttle_reasons" in frame else pd.Series(dtype=object)
    frame["throttled"] = [
        isinstance(t, str) and bool(t.strip()) for t in throttle.reindex(frame.index)
    ]
    frame = frame[np.isfinite(frame["throughput_img_s"]) & (frame["throughput_img_s"] > 0)]
    return frame.reset_index(drop=True)


def _fit(x: pd.Series, y: pd.Series):
    """linregress of y on x where both are known and x varies, else None."""
    known = np.isfinite(x.to_numpy(dtype=float)) & np.isfinite(y.to_numpy(dtype=float))
    xs, ys = x.to_numpy(dtype=float)[known], y.to_numpy(dtype=float)[known]
    if len(xs) < MIN_WINDOWS or np.ptp(xs) == 0 or np.ptp(ys) == 0:
        return None
    return scipy_stats.linregress(xs, ys)


def _time_fits(frame: pd.DataFrame, minutes: pd.Series) -> list:
    """The two regressions drift is read from: the windows within each process against
    time (both centred on the process's own means, one slope pooled over the processes),
    and the process means against the process's mean time. Windows of one process are not
    independent of each other's process, so a regression of every window on time would
    take one slow process for a trend; these two do not."""
    rates, process = frame["throughput_img_s"], frame["process"]
    within = _fit(
        minutes - minutes.groupby(process).transform("mean"),
        rates - rates.groupby(process).transform("mean"),
    )
    means = frame.assign(_minutes=minutes).groupby("process")[["_minutes", "throughput_img_s"]]
    means = means.mean()
    between = _fit(means["_minutes"], means["throughput_img_s"]) if len(means) >= 3 else None
    return [fit for fit in (within, between) if fit is not None]


def drift(frame: pd.DataFrame, target: float) -> Finding | None:
    """Throughput that moves with time, within processes or from one process to the next,
    significantly and by at least `DRIFT_SHARE_OF_TARGET` of the target over the run."""
    minutes = (frame["started_at_unix"] - frame["started_at_unix"].min()) / 60
    if not np.isfinite(minutes.to_numpy(dtype=float)).any():
        return None
    significant = [fit for fit in _time_fits(frame, minutes) if fit.pvalue < ALPHA]
    fit = _fit(minutes, frame["throughput_img_s"])
    if not significant or fit is None:
        return None
    # Relative to where the fitted line starts: "fell 9% over the run" reads from the start.
    start = float(frame["throughput_img_s"].mean()) - fit.slope * float(minutes.mean())
    per_minute = fit.slope / start
    change = per_minute * float(minutes.max())
    if abs(change) < DRIFT_SHARE_OF_TARGET * target:
        return None
    trend = fit.slope * (minutes - minutes.mean())
    share = min(float(trend.var() / frame["throughput_img_s"].var()), 1.0)
    p_value = min(f.pvalue for f in significant)
    return cause("drift", share, change=change, per_minute=per_minute, p=p_value)


def detrended(frame: pd.DataFrame, target: float) -> pd.DataFrame:
    """The windows with the drift over time taken out of their throughput (unchanged when
    there is no drift), so a trend is not read a second time as processes that differ."""
    if drift(frame, target) is None:
        return frame
    minutes = (frame["started_at_unix"] - frame["started_at_unix"].min()) / 60
    trend = _fit(minutes, frame["throughput_img_s"]).slope * (minutes - minutes.mean())
    return frame.assign(throughput_img_s=frame["throughput_img_s"] - trend)


def _slower_share(frame: pd.DataFrame, hit: pd.Series) -> float:
    """How much slower the windows in `hit` ran than the others (0.11: 11% slower)."""
    rates = frame["throughput_img_s"]
    if not hit.any() or hit.all():
        return math.nan
    return 1 - float(rates[hit].mean()) / float(rates[~hit].mean())


def _falls_with(frame: pd.DataFrame, column: str, limit: float, code: str) -> Finding | None:
    """Throughput that falls as `column` rises (a significant negative slope), with the
    windows past `limit` compared with the rest."""
    fit = _fit(frame[column], frame["throughput_img_s"])
    if fit is None or fit.slope >= 0 or fit.pvalue >= ALPHA:
        return None
    hit = frame[column] > limit
    slower = _slower_share(frame, hit)
    return cause(
        code,
        fit.rvalue**2,
        r2=fit.rvalue**2,
        p=fit.pvalue,
        peak=float(frame[column].max()),
        windows=int(hit.sum()) if np.isfinite(slower) else None,
        slower=slower if np.isfinite(slower) else None,
    )


def host_load(frame: pd.DataFrame) -> Finding | None:
    """Throughput that falls as other processes use more cores."""
    return _falls_with(frame, "other_cores", OVERLOAD_TOLERANCE_CORES, "host_load")


def steal(frame: pd.DataFrame) -> Finding | None:
    """Throughput that falls as the hypervisor steals more CPU time."""
    return _falls_with(frame, "steal_share", STEAL_LIMIT, "steal")


def clock(frame: pd.DataFrame) -> Finding | None:
    """Throughput that follows the SM clock; or, at one clock, throttled windows slower."""
    clocks = frame["sm_clock_mhz"]
    fit = _fit(clocks, frame["throughput_img_s"])
    throttled = int(frame["throttled"].sum())
    if fit is not None and fit.slope > 0 and fit.pvalue < ALPHA:
        return cause(
            "clock",
            fit.rvalue**2,
            r2=fit.rvalue**2,
            p=fit.pvalue,
            low_mhz=float(clocks.min()),
            high_mhz=float(clocks.max()),
            throttled=throttled,
        )
    fit = _fit(frame["throttled"].astype(float), frame["throughput_img_s"])
    if fit is None or fit.slope >= 0 or fit.pvalue >= ALPHA:
        return None
    slower = _slower_share(frame, frame["throttled"])
    return cause("clock", fit.rvalue**2, p=fit.pvalue, throttled=throttled, slower=slower)


def _eta_squared(frame: pd.DataFrame, groups: pd.Series) -> float:
    """The share of the window throughputs' variance between `groups` (sum of squares)."""
    rates = frame["throughput_img_s"]
    total = float(((rates - rates.mean()) ** 2).sum())
    if total <= 0:
        return 0.0
    means = rates.groupby(groups).transform("mean")
    return float(((means - rates.mean()) ** 2).sum()) / total


def split(process_means: Sequence[float], target: float) -> tuple[list[float], list[float]] | None:
    """The two groups of a process level split in two, or None: the widest gap between
    sorted process means, two or more processes on each side, wider than either side's
    range and than `SPLIT_SHARE_OF_TARGET` of the target."""
    means = sorted(float(m) for m in process_means if np.isfinite(m))
    if len(means) < 4:
        return None
    cut = max(range(2, len(means) - 1), key=lambda i: means[i] - means[i - 1])
    low, high = means[:cut], means[cut:]
    gap = high[0] - low[-1]
    if gap <= max(np.ptp(low), np.ptp(high)) or gap < SPLIT_SHARE_OF_TARGET * target * np.mean(
        means
    ):
        return None
    return low, high


def process_causes(frame: pd.DataFrame, target: float) -> list[Finding]:
    """A process level split in two (`split`), else processes that differ by more than
    their windows explain (one-way ANOVA), else nothing."""
    groups = [g["throughput_img_s"].to_numpy() for _, g in frame.groupby("process")]
    if len(groups) < 2:
        return []
    means = frame.groupby("process")["throughput_img_s"].mean()
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


def within_process_cv(frame: pd.DataFrame) -> float:
    """The pooled CV of the windows within one process (each relative to its process mean)."""
    relative = frame["throughput_img_s"] / frame.groupby("process")["throughput_img_s"].transform(
        "mean"
    )
    return stats.coefficient_of_variation(relative)


def causes(windows: Sequence[Mapping], target: float | None = None) -> list[Finding]:
    """Every likely cause of the windows' spread, the one accounting for most first; window
    noise when no external cause is found; `none` when there are no windows to read."""
    frame = window_frame(windows)
    target = FALLBACK_TARGET if target is None or not target > 0 else float(target)
    if len(frame) < 2:
        return [cause("none", 0.0)]
    found = [
        c
        for c in (drift(frame, target), host_load(frame), steal(frame), clock(frame))
        if c is not None
    ]
    found += process_causes(detrended(frame, target), target)
    if not found:
        found.append(cause("window_noise", 0.0, cv=within_process_cv(frame)))
    return sorted(found, key=lambda c: -c.numbers["share"])


def shared_slowdown(
    own: Mapping[int, float], others: Sequence[Mapping[int, float]]
) -> Finding | None:
    """Process throughputs (`own`, by round) that follow the other configurations measured in
    the same rounds (`others`, one mapping of round to rate per configuration): the
    machine's capacity moving under the whole group (module docstring). Each configuration is
    taken relative to its own mean, so precisions and variants of different speeds compare."""
    relative = [
        {r: rate / float(np.mean(list(rates.values()))) for r, rate in rates.items()}
        for rates in others
        if len(rates) >= 2
    ]
    if not relative:
        return None
    rounds = sorted(r for r in own if any(r in rel for rel in relative))
    group = pd.Series(
        [float(np.mean([rel[r] for rel in relative if r in rel])) for r in rounds], index=rounds
    )
    mine = pd.Series([float(own[r]) for r in rounds], index=rounds)
    fit = _fit(np.log(group), np.log(mine))
    if fit is None or fit.slope <= 0 or fit.pvalue >= ALPHA:
        return None
    dip = 1 - float(group.min() / group.median())
    return cause(
        "shared_slowdown",
        fit.rvalue**2,
        r2=fit.rvalue**2,
        p=fit.pvalue,
        configurations=len(relative),
        rounds=len(rounds),
        dip=dip,
    )


def cause_columns(found: Finding) -> dict:
    """One cause's numbers as summary.csv's `{cause}_{number}` columns."""
    return {f"{found.kind}_{n}": found.numbers.get(n) for n in CAUSE_NUMBERS.get(found.kind, ())}


def with_shared_slowdown(columns: Mapping, found: Finding | None) -> dict:
    """summary.csv's noise columns (`NOISE_COLUMNS`) with a shared slowdown put first (it explains the process
    level the windows' causes name)."""
    noise = {name: columns.get(name) for name in NOISE_COLUMNS}
    if found is None or missing(columns.get("noise_cause")):
        return noise
    ranked = [found.kind, *str(columns.get("noise_causes") or "").split(";")]
    return {
        **noise,
        "noise_cause": found.kind,
        "noise_causes": ";".join(c for c in ranked if c),
        **cause_columns(found),
    }


def process_cost_s(processes: Sequence[Mapping]) -> float | None:
    """Median seconds a measured worker process took, start to end (None: not recorded)."""
    spans = [
        float(p["ended_at_unix"]) - float(p["started_at_unix"])
        for p in processes
        if p.get("started_at_unix") is not None and p.get("ended_at_unix") is not None
    ]
    return float(np.median(spans)) if spans else None


def target_columns(process_rates: Sequence[float], target: float | None) -> dict:
    """What the target would take: the processes' spread (RSD) and the processes
    (`processes_for_spread`) it needs at that spread; None where fewer than two measured."""
    rates = [float(r) for r in process_rates if r is not None and np.isfinite(float(r))]
    if target is None or not target > 0 or len(rates) < 2:
        return {"process_rsd": None, "processes_needed": None}
    mean, spread = float(np.mean(rates)), float(np.std(rates, ddof=1))
    return {
        "process_rsd": spread / mean,
        "processes_needed": processes_for_spread(spread, mean, target),
    }


def noise_columns(document: Mapping) -> dict:
    """summary.csv's noise columns (`NOISE_COLUMNS`) for a run document that measured and
    missed its CI target: the top cause's code, every cause's code ranked (`;`-joined), the
    numbers of each, and what the target would take; all None otherwise."""
    columns = dict.fromkeys(NOISE_COLUMNS)
    if document.get("status") != "ok" or document.get("ci_target_met") is not False:
        return columns
    target = (document.get("timing") or {}).get("target_ci")
    processes = document.get("processes") or []
    found = causes(document.get("windows") or [], target)
    columns.update(noise_cause=found[0].kind, noise_causes=";".join(c.kind for c in found))
    for c in found:
        columns.update(cause_columns(c))
    rates = [p.get("throughput_img_s") for p in processes if p.get("throughput_img_s") is not None]
    columns.update(target_columns(rates, target), process_cost_s=process_cost_s(processes))
    return columns


def p_text(p: float) -> str:
    return "p<0.001" if p < 0.001 else "p<0.01" if p < 0.01 else f"p={p:.2f}"


def signed_pct(value: float) -> str:
    return ("+" if value >= 0 else "\u2212") + fmt_pct(abs(value))


def window_label(window: Mapping) -> str:
    """`p1w3`: process 1's window 3."""
    return f"p{window.get('process')}w{window.get('window')}"


def spread_columns(windows: Sequence[Mapping]) -> dict:
    """pyperf-style spread of a configuration's window throughputs: min and max, and the
    windows outside Tukey's fences (`nnperf.core.stats.tukey_outliers`, 1.5 IQR beyond the
    quartiles, as pyperf's `stats` counts outliers): their count and which ("p1w3, p2w0")."""
    rated = [w for w in windows if w.get("throughput_img_s") is not None]
    rates = [float(w["throughput_img_s"]) for w in rated]
    finite = [r for r in rates if np.isfinite(r)]
    outliers = stats.tukey_outliers(rates)
    return {
        "throughput_img_s_min": min(finite) if finite else None,
        "throughput_img_s_max": max(finite) if finite else None,
        "outliers": len(outliers) if finite else None,
        "outlier_windows": ", ".join(window_label(rated[i]) for i in outliers),
    }
