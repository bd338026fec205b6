"""Confidence intervals for the ratio of two throughputs, and what a report may say of them.

Every comparison nnperf states (a variant against the baseline, a precision against fp32, one
batch size against another, one machine against another) is a ratio of two mean
throughputs, each estimated from worker processes. The interval is built at the process
level, the level whose variation the windows inside a process cannot average away (Kalibera
& Jones, "Quantifying performance changes with effect size confidence intervals", 2012):

* **Paired** (`paired_ratio`): configurations measured in one job by interleaved processes
  (A B B A ..., `nnperf.engine.interleave`). Process *i* of A and process *i* of B ran next
  to each other, so drift and a neighbour's load hit both alike. The interval is a Student-t
  interval on the mean of the per-pair log ratios, exponentiated: drift common to a pair
  cancels in its log ratio, and a log ratio is symmetric (A/B and B/A get reciprocal
  intervals).
* **Unpaired** (`unpaired_ratio`): configurations measured apart. The interval is Fieller's
  for a ratio of two independent means, with Welch-Satterthwaite degrees of freedom; when
  the denominator's own interval reaches zero the ratio has no bounded interval, and says so.

Why not a bootstrap (scipy.stats.bootstrap, or Kalibera & Jones' hierarchical resampling): a
configuration is measured by 2-8 processes, and resampling three values yields few distinct
means, so percentile intervals come out too narrow exactly where the data is thinnest. The
t-based intervals are exact under normal process means and widen honestly with few
processes; scipy.stats supplies the t quantiles.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Collection, Mapping, Sequence

import numpy as np
from scipy import stats as scipy_stats

from nnperf.core.vocab import PAIRING_GRAINS

CONFIDENCE = 0.95
PAIRED, FIELLER = "paired", "fieller"
# What a ratio's interval allows to be said (`RatioCI.verdict`), and `out_of_reach`: an
# unresolved comparison the engine gave up because the rounds it needed could not fit in its
# members' budgets (`nnperf.engine.interleave`; never `RatioCI.verdict`'s, which knows no
# budget).
OUT_OF_REACH = "out_of_reach"
VERDICTS = ("faster", "slower", "tie", "unresolved", "no_ci", "unmeasured", OUT_OF_REACH)
# A paired interval needs two pairs at least: one pair has no spread to build one from.
MIN_PAIRS = 2
# The grain a paired ratio was measured at (`pairing_rounds`).
WINDOW_GRAIN, PROCESS_GRAIN = PAIRING_GRAINS


def pairing_rounds(
    a_rounds: Mapping[int, Collection[str]],
    b_rounds: Mapping[int, Collection[str]],
    a_name: str,
    b_name: str,
) -> tuple[list[int], str]:
    """The rounds a paired ratio of A over B is built from, and their grain. `a_rounds` maps
    each round A measured to the members it shared that round's worker process with
    (`nnperf.engine.sharing`; empty: it ran alone). Rounds in which A and B shared a process
    ran window by window inside it, which cancels the seconds-scale changes of the host that
    two processes side by side still carry (benchmarks/alternation_grain.py: 3-4x tighter
    pairs); where MIN_PAIRS of them exist the interval is built from them alone, not mixed
    with the looser rounds either ran alone (a group's first round always is)."""
    common = sorted(set(a_rounds) & set(b_rounds))
    shared = [r for r in common if b_name in a_rounds[r] and a_name in b_rounds[r]]
    if len(shared) >= MIN_PAIRS:
        return shared, WINDOW_GRAIN
    return common, PROCESS_GRAIN


def t_critical(df: float, confidence: float = CONFIDENCE) -> float:
    """Two-sided Student-t critical value (12.706 for df 1 at 95%)."""
    if not df >= 1:
        raise ValueError(f"df must be >= 1, got {df}")
    return float(scipy_stats.t.ppf(1 - (1 - confidence) / 2, df))


@dataclasses.dataclass(frozen=True)
class RatioCI:
    """`ratio` = throughput of A over throughput of B (above 1: A is faster), with its
    interval; `low`/`high` are None where no bounded interval exists (fewer than two
    processes or pairs, or a denominator whose interval reaches zero)."""

    ratio: float
    low: float | None
    high: float | None
    method: str | None
    n: int
    confidence: float = CONFIDENCE

    @property
    def bounded(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def separated(self) -> bool:
        """Whether the interval excludes 1: the difference is more than the noise."""
        return self.bounded and (self.low > 1 or self.high < 1)

    @property
    def within(self) -> float | None:
        """How far from 1 the interval reaches (0.04: within +/-4%), or None unbounded."""
        if not self.bounded:
            return None
        return max(1 - self.low, self.high - 1)

    @property
    def half_width_rel(self) -> float | None:
        if not self.bounded:
            return None
        return (self.high - self.low) / 2 / self.ratio

    def resolved(self, tolerance: float) -> bool:
        """Whether more measuring could change what may be said: the interval excludes 1
        (a difference), or lies within +/-`tolerance` of 1 (no difference that matters)."""
        within = self.within
        return self.separated or (within is not None and within <= tolerance)

    def verdict(self, tolerance: float) -> str:
        """What may be said of the ratio, as a code (`VERDICTS`; the engine's comparisons.json
        and the report's comparisons.csv share them): `faster` or `slower` (the interval
        excludes 1: A against B), `tie` (it lies within +/-`tolerance` of 1), `unresolved`
        (neither yet), `no_ci` (no interval: too few processes or pairs), `unmeasured`."""
        if not math.isfinite(self.ratio):
            return "unmeasured"
        if not self.bounded:
            return "no_ci"
        if self.separated:
            return "faster" if self.ratio > 1 else "slower"
        return "tie" if self.resolved(tolerance) else "unresolved"

    @classmethod
    def from_dict(cls, row, prefix: str = "ratio") -> "RatioCI":
        """The interval `as_dict` wrote (a comparison row of the run's comparisons.json)."""
        return cls(
            float(row[prefix]),
            row.get(f"{prefix}_ci_low"),
            row.get(f"{prefix}_ci_high"),
            row.get(f"{prefix}_method"),
            int(row.get(f"{prefix}_n") or 0),
        )

    def as_dict(self, prefix: str = "ratio") -> dict:
        return {
            prefix: self.ratio,
            f"{prefix}_ci_low": self.low,
            f"{prefix}_ci_high": self.high,
            f"{prefix}_method": self.method,
            f"{prefix}_n": self.n,
            f"{prefix}_separated": self.separated,
        }


def _finite_positive(values: Sequence[float]) -> np.ndarray:
    data = np.asarray([float(v) for v in values], dtype=float)
    return data[np.isfinite(data) & (data > 0)]


def paired_ratio(
    a_rates: Sequence[float], b_rates: Sequence[float], confidence: float = CONFIDENCE
) -> RatioCI:
    """The ratio A/B from paired process throughputs (`a_rates[i]` ran beside
    `b_rates[i]`): exp of the mean log ratio, with a t-interval over the pairs."""
    if len(a_rates) != len(b_rates):
        raise ValueError(f"paired rates differ in length: {len(a_rates)} and {len(b_rates)}")
    pairs = [
        (float(a), float(b))
        for a, b in zip(a_rates, b_rates)
        if math.isfinite(float(a)) and math.isfinite(float(b)) and a > 0 and b > 0
    ]
    if not pairs:
        return RatioCI(math.nan, None, None, None, 0, confidence)
    logs = np.log([a / b for a, b in pairs])
    centre = float(np.mean(logs))
    if len(logs) < 2:
        return RatioCI(math.exp(centre), None, None, PAIRED, 1, confidence)
    half = (
        t_critical(len(logs) - 1, confidence) * float(np.std(logs, ddof=1)) / math.sqrt(len(logs))
    )
    return RatioCI(
        math.exp(centre),
        math.exp(centre - half),
        math.exp(centre + half),
        PAIRED,
        len(logs),
        confidence,
    )


def unpaired_ratio(
    a_rates: Sequence[float], b_rates: Sequence[float], confidence: float = CONFIDENCE
) -> RatioCI:
    """The ratio of mean(A) to mean(B) from independent process throughputs, with
    Fieller's interval (no covariance) at Welch-Satterthwaite degrees of freedom."""
    a, b = _finite_positive(a_rates), _finite_positive(b_rates)
    if a.size == 0 or b.size == 0:
        return RatioCI(math.nan, None, None, None, 0, confidence)
    mean_a, mean_b = float(a.mean()), float(b.mean())
    ratio = mean_a / mean_b
    n = int(min(a.size, b.size))
    if a.size < 2 or b.size < 2:
        return RatioCI(ratio, None, None, FIELLER, n, confidence)
    var_a = float(a.var(ddof=1)) / a.size  # variance of each mean
    var_b = float(b.var(ddof=1)) / b.size
    if var_a == 0 and var_b == 0:
        return RatioCI(ratio, ratio, ratio, FIELLER, n, confidence)
    df = (var_a + var_b) ** 2 / (
        (var_a**2 / (a.size - 1) if var_a else 0.0) + (var_b**2 / (b.size - 1) if var_b else 0.0)
    )
    t = t_critical(df, confidence)
    g = t**2 * var_b / mean_b**2
    if g >= 1:
        return RatioCI(ratio, None, None, FIELLER, n, confidence)
    spread = (t / mean_b) * math.sqrt(var_a * (1 - g) + ratio**2 * var_b)
    return RatioCI(
        ratio, (ratio - spread) / (1 - g), (ratio + spread) / (1 - g), FIELLER, n, confidence
    )


def ratio_text(ci: RatioCI, what: str = "faster") -> str:
    """How a report states a ratio: "1.06x faster (95% CI 1.01-1.11)", "1.10x slower (0.91x,
    95% CI 0.88-0.94)", or "not separated (1.01x, 95% CI 0.97-1.04)": an interval that holds
    1 says no more than that, however narrow or wide (comparisons.csv's verdict says whether
    it is a tie within the CI target or unresolved).
    `what` names the direction of a ratio above 1 ("faster", "higher")."""
    level = f"{ci.confidence:.0%} CI"
    if not math.isfinite(ci.ratio):
        return "no ratio: nothing measured"
    if not ci.bounded:
        return f"{ci.ratio:.2f}x, not separated (no bounded {level}: too few processes)"
    interval = f"{level} {ci_bound_text(ci.low)}-{ci_bound_text(ci.high)}"
    if ci.separated and ci.ratio >= 1:
        return f"{ci.ratio:.2f}x {what} ({interval})"
    if ci.separated:
        return f"{1 / ci.ratio:.2f}x {_opposite(what)} ({ci.ratio:.2f}x, {interval})"
    return f"not separated ({ci.ratio:.2f}x, {interval})"


def ci_bound_text(value: float) -> str:
    """A bound to two decimals, or three where two would round it onto 1 (1.004 is not 1)."""
    text = f"{value:.2f}"
    return f"{value:.3f}" if text == "1.00" and value != 1 else text


def _opposite(what: str) -> str:
    return {"faster": "slower", "higher": "lower", "larger": "smaller"}.get(what, f"not {what}")
