"""Is the input pipeline the limit? The rule, and the summary.csv columns it reads and writes.

**Input-bound**: the timed steps wait for data more than `DATA_WAIT_LIMIT` of their time (a
step waiting a tenth of its time would train 11% faster with a loader that kept up: more
than any CI target), or the loader alone (its feeder iterated with no training,
`nnperf.engine.loader`) is below `LOADER_HEADROOM` x the training throughput even at its
upper bound (its CI's upper end, or its fastest window where lower): beside training it
shares the host, so its rate alone overstates what it delivers.

**Not input-bound**: data wait at most `DATA_WAIT_LIMIT` and the loader's lower bound (its
CI's lower end, or its slowest window where higher: a t-interval over two processes is
wide) at least `LOADER_HEADROOM` x. Anything else, or no loader rate, is **undetermined**.

`INPUT_BOUND_SHARE` (a quarter of the step in data wait and host-to-device copies, read from
the phase breakdown or an operator profile) is a stronger statement, kept apart.
"""

from __future__ import annotations

from typing import Mapping

from nnperf.core.stats import optional_number
from nnperf.core.vocab import INPUT_VERDICTS

INPUT_BOUND, NOT_INPUT_BOUND, UNDETERMINED = INPUT_VERDICTS
DATA_WAIT_LIMIT = 0.10
LOADER_HEADROOM = 1.10
# A step that waits on input for a quarter of its time or more is input-bound: no faster
# kernel can win more than that share back before the input pipeline is fixed, so the report
# says so before anything else.
INPUT_BOUND_SHARE = 0.25

# summary.csv's input columns, in order, after the timings (`summary_columns`).
LOADER_COLUMNS = (
    *(f"loader_rate_img_s{end}" for end in ("", "_ci95_low", "_ci95_high", "_min", "_max")),
    *(f"loader_{name}" for name in ("ci_method", "n_processes", "n_windows", "time_s")),
)


def verdict(throughput, low, high, wait, slowest=None, fastest=None) -> str:
    """`input_bound`, `not_input_bound` or `undetermined` (the module's rule): `low`, `high`
    the loader rate's 95% CI, `wait` the data-wait share, `slowest`/`fastest` the loader's
    extreme windows' rates."""
    numbers = map(optional_number, (throughput, low, high, wait, slowest, fastest))
    throughput, low, high, wait, slowest, fastest = numbers
    if throughput is None or throughput <= 0:
        return UNDETERMINED
    line = LOADER_HEADROOM * throughput
    upper = min((v for v in (high, fastest) if v is not None), default=None)
    if (wait is not None and wait > DATA_WAIT_LIMIT) or (upper is not None and upper < line):
        return INPUT_BOUND
    lower = max((v for v in (low, slowest) if v is not None), default=None)
    if wait is not None and lower is not None and lower >= line:
        return NOT_INPUT_BOUND
    return UNDETERMINED


def summary_columns(document: Mapping) -> dict:
    """summary.csv's input columns from one run document: the loader's rate with its CI, the
    data-wait share, the loader's rate over the training throughput and the verdict."""
    columns = {name: document.get(name) for name in (*LOADER_COLUMNS, "data_wait_share")}
    throughput = optional_number(document.get("throughput_img_s"))
    rate = optional_number(document.get("loader_rate_img_s"))
    measured = document.get("status") == "ok"
    columns["loader_headroom"] = rate / throughput if measured and rate and throughput else None
    names = ("throughput_img_s", *LOADER_COLUMNS[1:3], "data_wait_share", *LOADER_COLUMNS[3:5])
    columns["input_bound"] = verdict(*map(document.get, names)) if measured else UNDETERMINED
    return columns
