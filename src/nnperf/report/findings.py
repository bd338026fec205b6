"""Findings as records: a kind (a stable code), the configuration keys it is about, its numbers.

Sections compute what they find as `Finding`s and word them only when a page is rendered
(`nnperf.report.wording`), so that CSV and JSON carry codes and numbers, tests assert on
those, and one sentence per kind is written in one place. A finding is not a verdict on the
wording: two pages may word the same record differently.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

# Why a configuration that missed its CI target was noisy (summary.csv `noise_cause`,
# `nnperf.report.noise`), ranked there by the share of the variance each accounts for.
NOISE_CAUSES = (
    "shared_slowdown",
    "drift",
    "host_load",
    "steal",
    "clock",
    "bimodal",
    "process_level",
    "window_noise",
    "none",
)
# What the key findings are chosen from (`nnperf.report.sections.key_findings`).
KEY_KINDS = (
    "only_configuration",  # the only configuration measured for a machine and model
    "fastest",  # the fastest, separated from the runner-up by the ratio's 95% CI
    "fastest_tied",  # no single fastest: the tie rule names the tied ones
    "best_setting",  # the best precision or variant at one point
    "best_setting_tied",
    "limit_input",  # data wait and copies take most of a step
    "limit_overheads",  # far below both roofs
    "limit_compute",
    "limit_memory",
    "limit_unread",  # no roofline reading: only the largest phase
    "measuring_cost",
    "flagged_counts",  # how many configurations the notes flag, by kind
)
# What the detail sections find, worded by `nnperf.report.wording` (roofline, profiles,
# pipeline, accuracy).
DETAIL_KINDS = (
    "above_roof",  # a step point above a roof: the roof is under-measured
    "gpu_busy",  # an Nsight Compute profile's busy share of the timed step
    "null_peak",  # a ceilings JSON's null compute peak, with its reason code
    "above_peak",  # a measured roof above its peak
    "kernel_kind",  # the kernel kind taking most of a profiled step
    "profile_missing",  # an operator profile that did not run
    "profile_bound",  # what bounds an operator-profiled step
    "profile_memory",  # its peak memory and batch headroom
    "profile_input",  # what feeding its step costs
    "profile_note",  # a note the profile recorded (a code)
    "input_verdicts",  # whether data loading limits the measured configurations
    "largest_phase",  # per machine, the phase most often largest
    "waits_on_input",  # a step waiting on input a quarter of its time or more
    "more_waiting",  # the count of those past the ones listed
    "faster_but_later",  # faster per image, yet at the target later or never
)
KINDS = NOISE_CAUSES + KEY_KINDS + DETAIL_KINDS


@dataclasses.dataclass(frozen=True)
class Finding:
    """One finding: `kind` from `KINDS`; `about` the configuration keys it names (machine,
    device, model, precision, batch_size, variant: only those that apply) and any other
    names it rests on (a roof, a phase, the runner-up's precision); `numbers` what it
    quotes, unrounded (None where unknown)."""

    kind: str
    about: Mapping[str, object] = dataclasses.field(default_factory=dict)
    numbers: Mapping[str, float | int | None] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"finding kind {self.kind!r} is not one of {', '.join(KINDS)}")

    def number(self, name: str) -> float | int | None:
        return self.numbers.get(name)
