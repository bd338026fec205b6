"""The templates a family words a kind by (`say`): fields `{a[key]}` and `{n[key]}` are the
record's `about` and `numbers`, and format specs name the report's formatters (`FORMATS`:
`{n[share]:pct}`; `{n[jobs]:pick:job|jobs}` one or the other by the count)."""

from __future__ import annotations

import string

from nnperf.core.wording import count_of, missing
from nnperf.report.format import config_text, fmt, fmt_duration, fmt_ghz, fmt_pct, fmt_si
from nnperf.report.format import fmt_times, fmt_utc

PHASE_LABELS = {
    "data_wait": "data wait",
    "h2d": "host-to-device",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
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
    "count": count_of,
    "p": lambda p: "p<0.001" if p < 0.001 else "p<0.01" if p < 0.01 else f"p={p:.2f}",
    "signed": lambda v: ("+" if v >= 0 else "\u2212") + fmt_pct(abs(v)),
    "int": lambda v: str(int(v)),
    "pick": lambda v, choices: choices.split("|")[v != 1],
}


class _Formatter(string.Formatter):
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
