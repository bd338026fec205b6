"""The templates a family words a kind by (`say`): fields `{a[key]}` and `{n[key]}` are the
record's `about` and `numbers`, and format specs name the report's formatters (`FORMATS`:
`{n[share]:pct}`; `{n[jobs]:pick:job|jobs}` one or the other by the count)."""

from __future__ import annotations

import string

from nnperf.core.vocab import PHASES
from nnperf.core.wording import count_of, missing, unstable_text
from nnperf.report.format import config_text, fmt, fmt_duration, fmt_ghz, fmt_pct, fmt_si
from nnperf.report.format import fmt_times, fmt_utc

# The phases of a step, and the noise causes (`findings.NOISE_CAUSES`), as a sentence names them.
PHASE_LABELS = {p: p.replace("_", " ") for p in PHASES} | {"h2d": "host-to-device"}
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
FORMATS = {
    "pct": fmt_pct,
    "dur": fmt_duration,
    "utc": fmt_utc,
    "ghz": fmt_ghz,
    "x": fmt_times,
    "si": fmt_si,
    "n": fmt,
    "ms": lambda v: "n/a" if missing(v) else fmt(float(v) * 1e3, "ms"),
    "config": config_text,
    "where": lambda a: f"{config_text(a)} on {a.get('machine') or a['device']}",
    "upper": lambda v: str(v).upper(),
    "phase": PHASE_LABELS.__getitem__,
    "cause": lambda code: CAUSE_LABELS.get(code, code),
    "unstable": lambda row: unstable_text(row) or "no reason recorded",
    "count": count_of,
    "p": lambda p: "p<0.001" if p < 0.001 else "p<0.01" if p < 0.01 else f"p={p:.2f}",
    "signed": lambda v: ("+" if v >= 0 else "\u2212") + fmt_pct(abs(v)),
    "int": lambda v: str(int(v)),
    "pick": lambda v, choices: choices.split("|")[v != 1],
}


class _Formatter(string.Formatter):
    # A record holds only the keys that apply: one it lacks is None, as `.get` gives it.
    def get_field(self, field_name: str, args, kwargs):
        try:
            return super().get_field(field_name, args, kwargs)
        except (KeyError, IndexError):
            return None, field_name

    def format_field(self, value, spec: str) -> str:
        name, *unit = spec.split(":", 1)
        if name in FORMATS:
            return FORMATS[name](value, *unit)
        return super().format_field(value, spec)


_TEMPLATE = _Formatter()


def say(template: str | tuple, f=None, **fields) -> str:
    """`template` filled from the record `f` (`a`, `n`) and any other `fields`. A tuple template
    is said in parts: a string always, a mapping's clause only where the record has its key (a
    number, or a fact about it, neither missing nor zero)."""
    if f is not None:
        fields = {"a": f.about, "n": f.numbers, **fields}
    if isinstance(template, tuple):
        has = lambda k: not missing(v := f.numbers.get(k, f.about.get(k))) and v  # noqa: E731
        template = "".join(
            part if isinstance(part, str) else "".join(c for k, c in part.items() if has(k))
            for part in template
        )
    return _TEMPLATE.format(template, **fields)
