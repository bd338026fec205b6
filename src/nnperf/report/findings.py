"""Findings as records: a kind (a stable code), the configuration keys it is about, its numbers.

Sections return `Finding`s; `nnperf.report.wording` words them when a page is rendered, so
CSV and JSON carry codes and numbers, tests assert on those, and each kind is worded once.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

# Why a configuration that missed its CI target was noisy (summary.csv `noise_cause`,
# `nnperf.report.noise`), ranked there by the share of the variance each accounts for.
NOISE_CAUSES = tuple(
    "shared_slowdown drift host_load steal clock bimodal process_level window_noise none".split()
)
# A key-findings list's first finding on a machine and model names the configuration, the
# rest only what differs (`wording.words.sentences`).
LEADERS = ("only_configuration", "fastest", "fastest_tied")
# The key findings: the best precision or variant at one point by the tie rule; what limits
# the fastest (data wait, overheads far below both roofs, compute, memory, or no roofline
# reading: its largest phase); the study's cost; how many configurations the notes flag.
KEY_KINDS = LEADERS + tuple(
    "best_setting best_setting_tied limit_input limit_overheads limit_compute limit_memory "
    "limit_unread measuring_cost flagged_counts".split()
)
# What the detail sections find, worded by `nnperf.report.wording.details`.
DETAIL_KINDS = tuple(
    "above_roof gpu_busy null_peak above_peak kernel_kind profile_missing profile_bound "
    "profile_memory profile_input profile_note input_verdicts largest_phase waits_on_input "
    "more_waiting faster_but_later".split()
)
# The Measurement, Speedups, Machines compared and Environment sections' findings.
SECTION_KINDS = tuple(
    "study_span study_span_unknown duty_cycle machine_allows ci_target_count ci_missed "
    "dominant_level fixed_cost compile_cost speedup batch_scaling machine_fastest "
    "machine_tied shared_settings".split()
)
# The Notes: what was skipped and what was flagged, then what the report lacks.
NOTE_KINDS = tuple(
    "oom over_budget host_busy unstable high_variance roof_too_low profile_unchecked "
    "flop_counters_off profile_roof_flagged no_timed_runs no_kernels no_roofline_points no_ceilings".split()
)
KINDS = NOISE_CAUSES + KEY_KINDS + DETAIL_KINDS + SECTION_KINDS + NOTE_KINDS


@dataclasses.dataclass(frozen=True)
class Finding:
    """`kind` from `KINDS`; `about` the configuration keys it names (only those that apply)
    and any other names or rows it rests on; `numbers` what it quotes, unrounded."""

    kind: str
    about: Mapping[str, object] = dataclasses.field(default_factory=dict)
    numbers: Mapping[str, float | int | None] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"finding kind {self.kind!r} is not one of {', '.join(KINDS)}")
