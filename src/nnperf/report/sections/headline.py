"""The headline, first on the page: per device, each configuration's throughput and 95% CI,
MFU against the datasheet and measured peaks (`nnperf.report.bounds`' verdicts), what limits
it, its data-wait share and its flags, as short codes."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from nnperf.core.vocab import INPUT_VERDICTS
from nnperf.core.wording import missing
from nnperf.report.bounds import preferred_verdict, roofline_verdicts, study_readings
from nnperf.report.format import cells, estimate_text, fmt_pct, match_config, sort_configs, truthy
from nnperf.report.outline import Page, Section, Table, section
from nnperf.report.sections.measurement import target_met
from nnperf.report.sections.notes import high_cv
from nnperf.report.sections.roofline import above_roof

INTRO = (
    "Limit: compute or memory (roofline), host (GPU idle most of the step) or input (data "
    "loading). Flags: status, ci-missed (CI over its target), unstable, high-cv (see Notes)."
)


def throughput_cell(row: Mapping) -> str:
    """`105 (103–108)`; unstable is a flag here."""
    text = estimate_text({**row, "unstable": False}).replace(" img/s", "")
    return text.replace("95% CI ", "") if str(row.get("status", "ok")) == "ok" else "—"


def mfu_cell(verdicts: pd.DataFrame, row: Mapping, roof: str) -> str:
    """FLOP/s over the compute peak of `roof`, an ncu point first; a derived peak says so."""
    match = verdicts[verdicts["roof"] == roof].dropna(subset=["fraction_of_peak"])
    best = match_config(match.sort_values("source", key=lambda s: s.astype(str) != "ncu"), row)
    if best is None:
        return "—"
    derived = " (derived)" if best["roof_name"] == "derived" else ""
    return fmt_pct(best["fraction_of_peak"]) + derived


def limit_cell(row: Mapping, verdicts: pd.DataFrame, profiles: pd.DataFrame | None) -> str:
    """input (the input verdict), host (the ncu busy share), else the roofline's bound."""
    if str(row.get("status", "ok")) != "ok":
        return "—"
    if str(row.get("input_bound")) == INPUT_VERDICTS[0]:
        return "input"
    profile = match_config(profiles, row)
    if profile is not None and str(profile.get("busy_verdict")) == "host-bound":
        return "host"
    verdict = preferred_verdict(verdicts, row)
    return "—" if verdict is None else str(verdict["bound"])


def data_wait_share(row: Mapping):
    wait, step = row.get("data_wait_s_median"), row.get("step_time_s_median")
    if missing(row.get("data_wait_share")) and not (missing(wait) or missing(step)):
        return float(wait) / float(step)
    return row.get("data_wait_share")


def flags(row: Mapping, cv_threshold: float) -> list[str]:
    """What a reader must know before trusting the row, as codes."""
    status = str(row.get("status", "ok"))
    if status != "ok":
        return [status]
    flagged = {"ci-missed": target_met(row) is False, "unstable": truthy(row.get("unstable"))}
    flagged["high-cv"] = high_cv(row, cv_threshold)
    return [flag for flag, set_ in flagged.items() if set_]


def headline_table(rows: pd.DataFrame, verdicts, profiles, cv_threshold: float) -> pd.DataFrame:
    spec = {
        "img/s (95% CI)": throughput_cell,
        "MFU, datasheet": lambda r: mfu_cell(verdicts, r, "datasheet"),
        "MFU, measured": lambda r: mfu_cell(verdicts, r, "measured"),
        "Limit": lambda r: limit_cell(r, verdicts, profiles),
        "Data wait": lambda r: fmt_pct(data_wait_share(r)),
        "Flags": lambda r: " ".join(flags(r, cv_threshold)),
    }
    # `resnet18_cifar bf16 bs32 tuned`
    config = rows["model"].astype(str) + " " + rows["precision"].astype(str) + " bs"
    config += rows["batch_size"].astype(int).astype(str) + " " + rows["variant"].astype(str)
    return cells(rows, {h: (None, cell) for h, cell in spec.items()}, {"Configuration": config})


def build(page: Page) -> Section | None:
    summary = page.tables.summary
    if summary is None or summary.empty:
        return None
    verdicts = above_roof(roofline_verdicts(study_readings(page.tables)), page.tables.ceilings)
    groups = sort_configs(summary).groupby(["machine", "device"], sort=False)
    profiles, cv = page.tables.profiles, page.cv_threshold
    tables = [
        Table(f"{device} on {machine}", headline_table(group, verdicts, profiles, cv))
        for (machine, device), group in groups
    ]
    return section(
        "headline",
        "At a glance",
        intro=INTRO,
        tables=tables,
        sources=page.sources("summary", "roofline_points", "ceilings", "profiles"),
    )
