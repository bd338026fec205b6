"""Is the input pipeline the limit? The rule, and the summary.csv columns it reads and writes.

A configuration is **input-bound** when its loader cannot feed its step, seen either way:

* **the step waits for data**: the timed steps spend more than `DATA_WAIT_LIMIT` of their
  time in `data_wait` (summed over every timed step: `nnperf.engine.loader.data_wait_share`).
  A step that waits a tenth of its time would train more than 11% faster with a loader that
  kept up: more than any CI target (1-3%), so the loss is measured, not noise, and as large
  as what a typical toggle of a variant wins.
* **the loader alone is barely faster than training**: the loader's own rate (the feeder
  iterated with no training, `nnperf.engine.loader`) is below `LOADER_HEADROOM` x the
  training throughput even at its upper bound: the upper end of its 95% CI, or its fastest
  window where that is lower. Run beside training, a loader shares the host (its cores,
  memory bandwidth, the copy engine), so its rate alone overstates what it delivers; with
  less than a tenth in hand, the step is fed only as long as nothing else slows the host,
  and a faster model, device or precision would wait.

It is **not input-bound** when both say the opposite: the data wait is at most
`DATA_WAIT_LIMIT` and the loader's lower bound (the lower end of its CI, or its slowest
window where that is higher) is at least `LOADER_HEADROOM` x the training throughput. The
windows stand beside the interval because a t-interval over two or three processes is wide
(t = 12.7 for two): a loader that outran the step 300-fold in every window it was timed
is not limiting it, whatever the spread of its process means on a busy host. Anything else
is **undetermined**: no loader rate (a rehearsal's replayed workers, a run document from
before the loader windows), a loader whose bounds straddle the line, or a configuration not
measured. Verdicts are codes
(`nnperf.core.vocab.INPUT_VERDICTS`); sentences are the report's.

The breakdown's `INPUT_BOUND_SHARE` (a quarter of the step in data wait *and* host-to-device
copies: the input pipeline is what limits the step first) is a stronger statement than this
one and is kept apart: a step can be input-bound here while its largest phase is still the
model's.
"""

from __future__ import annotations

from typing import Mapping

from nnperf.core.vocab import INPUT_VERDICTS
from nnperf.core.stats import optional_number

INPUT_BOUND, NOT_INPUT_BOUND, UNDETERMINED = INPUT_VERDICTS

# Above this share of the step spent waiting for a batch, the loader is what the step waits
# on (module docstring).
DATA_WAIT_LIMIT = 0.10
# The loader alone must outrun training by this factor to be said to feed it (module
# docstring).
LOADER_HEADROOM = 1.10

# summary.csv's input columns, in order, after the timings (`summary_columns`).
LOADER_COLUMNS = (
    "loader_rate_img_s",
    "loader_rate_img_s_ci95_low",
    "loader_rate_img_s_ci95_high",
    "loader_rate_img_s_min",
    "loader_rate_img_s_max",
    "loader_ci_method",
    "loader_n_processes",
    "loader_n_windows",
    "loader_time_s",
)


def _bound(interval_end: float | None, window: float | None, pick) -> float | None:
    """The tighter of a CI end and a window's rate (`pick`: max for the lower bound, min for
    the upper), whichever are known."""
    known = [v for v in (interval_end, window) if v is not None]
    return pick(known) if known else None


def verdict(
    throughput: float | None,
    loader_ci_low: float | None,
    loader_ci_high: float | None,
    data_wait_share: float | None,
    loader_slowest: float | None = None,
    loader_fastest: float | None = None,
) -> str:
    """`input_bound`, `not_input_bound` or `undetermined` (module docstring has the rule):
    `loader_ci_*` the loader rate's 95% CI, `loader_slowest`/`loader_fastest` the rates of
    its slowest and fastest window."""
    throughput, low, high, wait, slowest, fastest = (
        optional_number(v)
        for v in (
            throughput,
            loader_ci_low,
            loader_ci_high,
            data_wait_share,
            loader_slowest,
            loader_fastest,
        )
    )
    if throughput is None or throughput <= 0:
        return UNDETERMINED
    if wait is not None and wait > DATA_WAIT_LIMIT:
        return INPUT_BOUND
    line = LOADER_HEADROOM * throughput
    upper = _bound(high, fastest, min)
    if upper is not None and upper < line:
        return INPUT_BOUND
    lower = _bound(low, slowest, max)
    if wait is not None and lower is not None and lower >= line:
        return NOT_INPUT_BOUND
    return UNDETERMINED


def summary_columns(document: Mapping) -> dict:
    """summary.csv's input columns from one run document: the loader's rate with its CI, the
    data-wait share, the loader's rate over the training throughput (`loader_headroom`) and
    the verdict."""
    columns = {name: document.get(name) for name in LOADER_COLUMNS}
    throughput = optional_number(document.get("throughput_img_s"))
    rate = optional_number(document.get("loader_rate_img_s"))
    measured = document.get("status") == "ok"
    columns["data_wait_share"] = document.get("data_wait_share")
    columns["loader_headroom"] = rate / throughput if measured and rate and throughput else None
    columns["input_bound"] = (
        verdict(
            throughput,
            document.get("loader_rate_img_s_ci95_low"),
            document.get("loader_rate_img_s_ci95_high"),
            document.get("data_wait_share"),
            document.get("loader_rate_img_s_min"),
            document.get("loader_rate_img_s_max"),
        )
        if measured
        else UNDETERMINED
    )
    return columns
