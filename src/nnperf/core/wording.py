"""Counts and stop reasons in words, alike wherever nnperf writes one: a job's log line, the
report.

`count_of(3, "process")` is `3 processes`, `count_of(None, "window")` is `? windows`;
`missing` says which values are unknown (None, NaN, pandas' NA), for the report's numbers as
for these. `stop_sentence` words why a measurement stopped from the code and the numbers the
engine records (run JSON `stop_reason` and `stop_numbers`, summary.csv `stop_<name>`): the
engine stores no sentence, and its log line and the report word the same record alike. It
lives in core, not in the report, because the engine's log line is worded too and the engine
may not import the report.
"""

from __future__ import annotations

import math
from typing import Mapping

import pandas as pd

from nnperf.core import vocab


def missing(value) -> bool:
    if value is None or value is pd.NA:
        return True
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return False


def count_of(value, noun: str) -> str:
    """`1 window`, `12 windows`, `3 processes`, `? windows` where unknown."""
    plural = noun + ("es" if noun.endswith("s") else "s")
    if missing(value):
        return f"? {plural}"
    n = int(value)
    return f"{n} {noun if n == 1 else plural}"


# What each one-time step of a worker process carries (`nnperf.engine.stopping.ONE_TIME_KINDS`).
ONE_TIME_WHAT = {
    "first_step": "the first step (allocation, cuDNN autotuning)",
    "compile": "compilation (torch.compile)",
    "recording": "CUDA-graph recording",
}


def record_numbers(record: Mapping, prefix: str, names) -> dict:
    """The known numbers of a run document's `<prefix>_numbers` mapping, or of a summary.csv
    row's `<prefix>_<name>` columns (the same numbers flattened)."""
    numbers = record.get(f"{prefix}_numbers")
    if not isinstance(numbers, Mapping):
        numbers = {name: record.get(f"{prefix}_{name}") for name in names}
    return {name: value for name, value in numbers.items() if not missing(value)}


def stop_numbers_of(record: Mapping) -> dict:
    """The known stop numbers of a run document or a summary.csv row (`record_numbers`)."""
    return record_numbers(record, "stop", vocab.STOP_NUMBERS)


def stop_sentence(reason, numbers: Mapping, phase: str | None = None) -> str | None:
    """Why a measurement stopped, from its `stop_reason` code and `stop_numbers`; `phase` is an
    over-budget one's `over_budget_phase` (a one-time step's kind, or "steady"). None for no
    reason. A number the record lacks is left out of the sentence, not guessed."""
    n = {name: value for name, value in numbers.items() if not missing(value)}
    if not isinstance(reason, str) or not reason:
        return None
    if reason == "ci_target":
        if "ci_half_width_rel" in n and "target_ci" in n:
            return (
                f"its 95% CI reached \u00b1{n['ci_half_width_rel']:.1%}, within its target of "
                f"{n['target_ci']:.0%}"
            )
        return "its 95% CI reached its target"
    if reason == "budget":
        spent = (
            f" ({n['spent_s']:.0f} s of timing.max_seconds {n['budget_s']:g} s)"
            if "spent_s" in n and "budget_s" in n
            else " (timing.max_seconds)"
        )
        return (
            f"the time budget ran out first{spent}; a larger budget buys more processes and "
            "windows"
        )
    if reason == "max_processes":
        limit = f" = {int(n['max_processes'])}" if "max_processes" in n else ""
        return f"it reached the process limit first (timing.max_processes{limit})"
    if reason == "target_unreachable":
        return "it stopped early, the target out of reach" + _unreachable(n)
    if reason == "over_budget":
        if phase in ONE_TIME_WHAT:
            return _one_time_over(phase, n)
        return _steady_over(n)
    return f"it stopped on {reason}"


def _unreachable(n: Mapping) -> str:
    needed = ("process_spread_rel", "target_ci", "processes_needed_low", "spread_low_rel")
    if not all(name in n for name in needed):
        return ""
    fit = n.get("processes_fit")
    cap = n.get("max_processes")
    if cap is not None and (fit is None or fit > cap):
        limit = f"timing.max_processes is {int(cap)}"
    elif fit is not None:
        limit = f"{int(fit)} fit in timing.max_seconds"
    else:
        limit = "no more fit"
    # The count is judged at the spread's lower bound, so it is a floor; at the point spread
    # (`processes_needed`) the target asks for more.
    point = (
        f" ({int(n['processes_needed'])} at the measured spread)" if "processes_needed" in n else ""
    )
    return (
        f": process-to-process spread {n['process_spread_rel']:.1%}: a {n['target_ci']:.0%} CI "
        f"would need ~{int(n['processes_needed_low'])} processes even at the spread's 90% "
        f"lower bound ({n['spread_low_rel']:.1%}){point}, and {limit}"
    )


def out_of_reach_sentence(rounds, needed=None, fit=None) -> str:
    """Why a comparison was given up (verdict `out_of_reach`, `nnperf.engine.interleave`):
    `rounds` paired so far and, where the job recorded them, the rounds it would need
    (`rounds_needed`, a floor) and those its members' budgets fit (`rounds_fit`)."""
    after = "" if missing(rounds) else f" after {count_of(rounds, 'round')}"
    numbers = ""
    if not missing(needed) and not missing(fit):
        numbers = f" (~{int(needed)} needed, {int(fit)} fit)"
    return (
        f"out of reach{after}: the rounds both budgets still fit could not resolve "
        f"it{numbers}, so the group stopped measuring for it"
    )


def _steady_over(n: Mapping) -> str:
    if "step_s" not in n:
        return "its warm-up and minimal windows cannot fit in timing.max_seconds"
    at_least = "at least " if n.get("step_lower_bound") else ""
    text = f"one step takes {at_least}{n['step_s']:.1f} s"
    if all(name in n for name in ("steps_left", "min_windows", "timed_steps", "needed_s")):
        text += (
            f", so the {int(n['steps_left'])} steps still needed (warm-up and "
            f"{count_of(n['min_windows'], 'window')} of {int(n['timed_steps'])} steps) need "
            f"{at_least}{n['needed_s']:.0f} s"
        )
    if "left_s" in n and "budget_s" in n:
        text += (
            f", more than the {n['left_s']:.0f} s left of timing.max_seconds {n['budget_s']:g} s"
        )
    return text


def _one_time_over(phase: str, n: Mapping) -> str:
    took = f" took more than {n['one_time_s']:.0f} s" if "one_time_s" in n else " ran too long"
    bound = f" = {n['bound_s']:g} s" if "bound_s" in n else ""
    return (
        f"{ONE_TIME_WHAT[phase]}{took}, past its bound timing.max_{phase}_seconds"
        f"{bound}; no steady step was measured (a one-time cost says nothing about the step "
        "time)"
    )


# --- unstable measurements ------------------------------------------------------------------


def unstable_numbers_of(record: Mapping) -> dict:
    """The known unstable numbers of a run document or a summary.csv row (`record_numbers`)."""
    return record_numbers(record, "unstable", vocab.UNSTABLE_NUMBERS)


def unstable_codes(value) -> list[str]:
    """`unstable_reasons` as a list of codes, from a run document's list or summary.csv's
    "|"-joined cell."""
    if isinstance(value, str):
        return [code for code in value.split("|") if code]
    if not isinstance(value, (list, tuple)):
        return []
    return [code for code in value if isinstance(code, str) and code]


def _windows_hit(code: str, n: Mapping) -> str:
    hit, of = n.get(f"{code}_windows"), n.get("windows")
    return f"{int(hit)} of {count_of(of, 'window')}: " if hit is not None else ""


def _host_overloaded(n: Mapping) -> str:
    text = "host overloaded"
    if "other_cores" in n and "cores" in n:
        text += f": other processes used {n['other_cores']:.1f} of {n['cores']:.0f} cores"
    if "own_threads" in n:
        text += f" beside this run's {n['own_threads']:.0f} threads"
    return _windows_hit("host_overloaded", n) + text


def _cpu_steal(n: Mapping) -> str:
    steal = f" {n['steal_share']:.0%}" if "steal_share" in n else ""
    return _windows_hit("cpu_steal", n) + f"CPU steal{steal}"


def _gpu_throttled(n: Mapping) -> str:
    why = n.get("throttle_reasons")
    why = f" ({str(why).replace('|', ', ')})" if why else ""
    return _windows_hit("gpu_throttled", n) + f"GPU throttled{why}"


def _sm_clock_drop(n: Mapping) -> str:
    text = "SM clock dropped"
    if "sm_clock_min_mhz" in n and n.get("sm_clock_median_mhz"):
        low, median = n["sm_clock_min_mhz"], n["sm_clock_median_mhz"]
        text = (
            f"SM clock {low:.0f} MHz, {1 - low / median:.0%} under the configuration's median "
            f"{median:.0f} MHz"
        )
    return _windows_hit("sm_clock_drop", n) + text


def _process_stopped_at_budget(n: Mapping) -> str:
    after = f" after up to {n['stopped_after_s']:.1f} s" if "stopped_after_s" in n else ""
    return f"{count_of(n.get('stopped_processes'), 'process')} stopped at the budget{after}"


def _host_loaded_while_timed(n: Mapping) -> str:
    load = (
        f": other processes used {n['host_load_other_cores']:.1f} of {n['cores']:.0f} cores"
        if "host_load_other_cores" in n and "cores" in n
        else ""
    )
    return (
        f"host loaded while the step was timed{load} (the step may be slower than on a quiet "
        "machine)"
    )


def _process_oom(n: Mapping) -> str:
    return f"{count_of(n.get('oom_processes'), 'further process')} ran out of memory"


UNSTABLE_WORDING = {
    "host_overloaded": _host_overloaded,
    "cpu_steal": _cpu_steal,
    "gpu_throttled": _gpu_throttled,
    "sm_clock_drop": _sm_clock_drop,
    "process_stopped_at_budget": _process_stopped_at_budget,
    "host_loaded_while_timed": _host_loaded_while_timed,
    "process_oom": _process_oom,
}


def unstable_sentence(code: str, numbers: Mapping) -> str:
    """Why a measurement is unstable, for one `vocab.UNSTABLE_REASONS` code and the run's
    `unstable_numbers`; an unknown code is shown as it is."""
    n = {name: value for name, value in numbers.items() if not missing(value)}
    word = UNSTABLE_WORDING.get(code)
    return word(n) if word else code


def unstable_sentences(reasons, numbers: Mapping) -> list[str]:
    """`unstable_sentence` of each code of `unstable_reasons` (list or "|"-joined)."""
    return [unstable_sentence(code, numbers) for code in unstable_codes(reasons)]


def unstable_text(record: Mapping) -> str:
    """The reasons of a run document or summary.csv row, worded and "; "-joined ("" for none)."""
    return "; ".join(
        unstable_sentences(record.get("unstable_reasons"), unstable_numbers_of(record))
    )


def unstable_columns(document: Mapping) -> dict:
    """summary.csv's `unstable_reasons` ("|"-joined codes) and `unstable_<name>` numbers of a
    run document."""
    numbers = unstable_numbers_of(document)
    return {
        "unstable_reasons": "|".join(unstable_codes(document.get("unstable_reasons"))),
        **{f"unstable_{name}": numbers.get(name) for name in vocab.UNSTABLE_NUMBERS},
    }


def training_budget_sentence(numbers: Mapping) -> str:
    """Why a training run stopped at its budget, from its `stop_numbers`."""
    n = {name: value for name, value in numbers.items() if not missing(value)}
    if not all(k in n for k in ("train_time_s", "next_epoch", "projected_epoch_s", "budget_s")):
        return "the next epoch would not fit the recipe's max_seconds"
    return (
        f"stopped after {n['train_time_s']:.3g} s of training: epoch {int(n['next_epoch'])} "
        f"would take ~{n['projected_epoch_s']:.3g} s more, past the recipe's max_seconds = "
        f"{n['budget_s']:g}"
    )
