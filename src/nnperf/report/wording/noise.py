"""The noise causes in words: summary.csv's noise columns (`nnperf.report.noise`) in, one
sentence per cause out, then what the CI target would take. The only place these are worded.
"""

from __future__ import annotations

from typing import Mapping

from nnperf.core.wording import count_of, missing
from nnperf.core.vocab import OVERLOAD_TOLERANCE_CORES, STEAL_LIMIT
from nnperf.report.format import fmt_duration, fmt_pct
from nnperf.report.noise import CAUSE_NUMBERS


def p_text(p: float) -> str:
    return "p<0.001" if p < 0.001 else "p<0.01" if p < 0.01 else f"p={p:.2f}"


def signed_pct(value: float) -> str:
    return ("+" if value >= 0 else "\u2212") + fmt_pct(abs(value))


# How a note names each cause.
CAUSE_LABELS = {
    "shared_slowdown": "the machine slowing under the whole group",
    "drift": "drift over time",
    "host_load": "host load",
    "steal": "CPU steal",
    "clock": "the clock",
    "bimodal": "a process level split in two",
    "process_level": "the process level",
    "window_noise": "window-level noise, no external cause found",
    "none": "unknown, no windows recorded",
}


def numbers_of(row: Mapping, code: str) -> dict:
    """One cause's numbers from a summary row's `{cause}_{number}` columns (None: unknown)."""
    return {
        n: None if missing(row.get(f"{code}_{n}")) else row.get(f"{code}_{n}")
        for n in CAUSE_NUMBERS.get(code, ())
    }


def _slower(n: Mapping, past: str) -> str:
    if n["slower"] is None or n["windows"] is None:
        return ""
    return f"; the {count_of(n['windows'], 'window')} {past} ran {fmt_pct(n['slower'])} slower"


def cause_sentence(code: str, n: Mapping) -> str:
    """One cause's sentence from its numbers (`numbers_of`)."""
    if code == "shared_slowdown":
        return (
            f"Shared slowdowns: its processes rose and fell with the "
            f"{count_of(n['configurations'], 'other configuration')} measured beside them over "
            f"{count_of(n['rounds'], 'round')} (r² {n['r2']:.2f}, {p_text(n['p'])}; the "
            f"group's slowest round {fmt_pct(n['dip'])} under its median): the machine slowed "
            "under all of them; paired comparisons cancel this, its own CI cannot."
        )
    if code == "drift":
        return (
            f"Drift: throughput {'fell' if n['change'] < 0 else 'rose'} "
            f"{fmt_pct(abs(n['change']))} over the run (slope {signed_pct(n['per_minute'])}/min, "
            f"{p_text(n['p'])})."
        )
    if code == "host_load":
        return (
            f"Host load: other processes used up to {n['peak']:.1f} cores and throughput fell "
            f"as they did (r² {n['r2']:.2f}, {p_text(n['p'])})"
            + _slower(n, f"beside more than {OVERLOAD_TOLERANCE_CORES} of a core")
            + "."
        )
    if code == "steal":
        return (
            f"Steal: the hypervisor took up to {fmt_pct(n['peak'])} of the CPU time and "
            f"throughput fell as it did (r² {n['r2']:.2f}, {p_text(n['p'])})"
            + _slower(n, f"with more than {fmt_pct(STEAL_LIMIT)} steal")
            + "."
        )
    if code == "clock" and n["low_mhz"] is not None:
        throttled = f", {n['throttled']} windows throttled" if n["throttled"] else ""
        return (
            f"Clock: the SM clock ranged {n['low_mhz']:.0f}–{n['high_mhz']:.0f} MHz{throttled} "
            f"and throughput followed it (r² {n['r2']:.2f}, {p_text(n['p'])})."
        )
    if code == "clock":
        return (
            f"Clock: {n['throttled']} windows were throttled and ran {fmt_pct(n['slower'])} "
            f"slower than the rest ({p_text(n['p'])})."
        )
    if code == "bimodal":
        return (
            f"A process level split in two: {n['low_n']} processes at about "
            f"{n['low_img_s']:.3g} img/s and {n['high_n']} at about {n['high_img_s']:.3g} "
            f"({fmt_pct(n['gap'])} apart), as when cuDNN picks one of two algorithms."
        )
    if code == "process_level":
        return (
            f"Process level: the {n['n']} processes settle at "
            f"{n['low_img_s']:.3g}–{n['high_img_s']:.3g} img/s, more apart than their windows "
            f"explain (one-way ANOVA {p_text(n['p'])})."
        )
    if code == "window_noise":
        return (
            f"No external cause found: windows of one process vary with a CV of "
            f"{fmt_pct(n['cv'])}, with no drift, load, steal or clock change behind it."
        )
    return "No windows were recorded to read the noise from."


# The numbers a cause's sentence may go without (worded when present): the windows slowed
# beside load or steal, and the clock's two forms (a range with r², or throttled windows).
OPTIONAL_NUMBERS = {"slower", "windows", "throttled", "low_mhz", "high_mhz", "r2"}


def _cause_or_label(code: str, n: Mapping) -> str:
    """The cause's sentence, or its name alone where the row lacks a number the sentence
    quotes (a summary.csv written before the cause carried its numbers)."""
    optional = OPTIONAL_NUMBERS if code == "clock" else OPTIONAL_NUMBERS - {"r2"}
    if any(v is None for name, v in n.items() if name not in optional):
        return f"{CAUSE_LABELS.get(code, code).capitalize()}."
    return cause_sentence(code, n)


def target_sentence(row: Mapping) -> str | None:
    """What the CI target would take at the measured process spread."""
    target, needed = row.get("ci_target"), row.get("processes_needed")
    measured = row.get("n_processes")
    if missing(target):
        return None
    if missing(needed):
        return (
            f"The {fmt_pct(target)} target needs at least two processes: with "
            f"{count_of(measured, 'process')} the process spread is unmeasured."
        )
    needed = int(needed)
    text = (
        f"At the process spread (RSD {fmt_pct(row.get('process_rsd'))}) the "
        f"{fmt_pct(target)} target would take {needed} processes"
    )
    if missing(measured) or needed <= int(measured):
        return text + ", no more than measured: the windows within them are the noise."
    more = needed - int(measured)
    text += f", {more} more than the {int(measured)} measured"
    cost = row.get("process_cost_s")
    if not missing(cost) and cost > 0:
        text += f" (about {fmt_duration(more * cost)} at {fmt_duration(cost)} per process)"
    return text + "."


def noise_text(row: Mapping) -> str:
    """Every cause a summary row names (`noise_causes`, ranked), then what the target would
    take; empty where the row names none."""
    if missing(row.get("noise_cause")):
        return ""
    codes = str(row.get("noise_causes") or row["noise_cause"]).split(";")
    sentences = [_cause_or_label(code, numbers_of(row, code)) for code in codes if code]
    sentences.append(target_sentence(row) or "")
    return " ".join(s for s in sentences if s)
