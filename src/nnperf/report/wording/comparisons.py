"""comparisons.csv's ratios in words: a precision or variant against its reference, batch-size
scaling and machine against machine. A record's `about["row"]` (or `rows`) are comparisons.csv
rows; the ratio and its interval are worded by `comparisons.ratio_text` everywhere."""

from __future__ import annotations

from typing import Mapping

from nnperf.core.wording import missing
from nnperf.report.comparisons import ci_of, interval_cell, names, ratio_text
from nnperf.report.findings import Finding
from nnperf.report.format import GROUP_KEYS, config_text, fmt, fmt_pct, fmt_times
from nnperf.report.wording.findings import differing

# A batch size whose throughput is, over its whole 95% interval, at least this fraction of
# the top batch size's counts as saturated (a run-to-run spread of a few percent is normal,
# see the CV flag), so larger batches are not worth their memory.
SATURATION = 0.95


def side(row: Mapping, side: str) -> dict:
    """One side's keys of a comparisons.csv row (`a` or `b`), named as summary.csv names them."""
    return {k: row.get(f"{side}_{k}") for k in GROUP_KEYS}


def speedup(f: Finding, named=None) -> str:
    """`bf16 is 1.80x faster (95% CI 1.78-1.82) than fp32 for resnet18_cifar at batch 256
    (baseline) on M: ...`, or `bf16 vs fp32 for ...: not separated ...`."""
    row, column = f.about["row"], f.about["column"]
    ci, a, b = ci_of(row), side(row, "a"), row[f"b_{column}"]
    if column == "precision":
        subject, config = a["precision"], config_text(a, precision=False)
    else:
        subject, config = f"The {a['variant']} variant", config_text(a, variant=False)
    means = f"{fmt(row['a_value'], 'img/s')} vs {fmt(row['b_value'], 'img/s')}"
    where = f"for {config} on {a['machine']}"
    if ci.separated:
        text = f"{subject} is {ratio_text(ci)} than {b} {where}: {means}."
    else:
        text = f"{subject} vs {b} {where}: {ratio_text(ci)}; {means}."
    if row.get("verdict") == "unresolved":
        per = "rounds" if row["method"] == "paired" else "processes"
        text += (
            f" Unresolved: its CI reaches beyond the ±{fmt_pct(row['ci_target'])} target "
            f"around 1 after {int(row['rounds'])} {per}."
        )
    return text


def _best_batch(tops: list[Mapping], largest: int) -> str:
    """What the tie rule allows to be said of the best batch size."""
    if not tops:
        return ""
    top = int(tops[0]["a_batch_size"])
    tied = sorted({top, *(int(r["b_batch_size"]) for r in tops if r["verdict"] != "faster")})
    closest = min(tops, key=lambda r: float(r["ratio"]))
    ratio = f"batch {top} vs {int(closest['b_batch_size'])}: {ratio_text(ci_of(closest))}"
    if len(tied) > 1:
        listed = ", ".join(str(b) for b in tied[:-1])
        return f"; no best batch size: batch {listed} and {tied[-1]} are tied ({ratio})"
    if top == largest:
        return f"; it is still rising at the largest batch size that ran ({ratio})"
    return f"; batch {top} is the best, at {fmt(tops[0]['a_value'], 'img/s')} ({ratio})"


def _saturation(tops: list[Mapping]) -> str:
    """The smallest batch size whose whole interval reaches SATURATION of the leader's."""
    reaching = [
        r for r in tops if not missing(r["ci95_high"]) and float(r["ci95_high"]) <= 1 / SATURATION
    ]
    if not reaching:
        return ""
    row = min(reaching, key=lambda r: int(r["b_batch_size"]))
    return (
        f"; batch {int(row['b_batch_size'])} already reaches {fmt_pct(SATURATION)} of batch "
        f"{int(row['a_batch_size'])} (that one is {fmt_times(row['ratio'])} of it, 95% CI "
        f"{interval_cell(ci_of(row))})"
    )


def batch_scaling(f: Finding, named=None) -> str:
    """The largest batch size against the smallest (`about["gain"]`), then the best batch
    size and saturation from the leader's rows (`about["tops"]`); after the list named the
    configuration, only what differs from it."""
    a, gain, tops = f.about, f.about["gain"], list(f.about["tops"])
    largest = int(gain["a_batch_size"])
    against = (
        f"batch {largest} against batch {int(gain['b_batch_size'])} "
        f"({fmt(gain['a_value'], 'img/s')} vs {fmt(gain['b_value'], 'img/s')}): "
        f"{ratio_text(ci_of(gain), 'higher')}"
    )
    if named is None:
        text = f"For {config_text(a, batch=False)} on {a['machine']}, {against}"
    else:
        short = differing(a, named)
        text = f"For {short}, {against}" if short else against[0].upper() + against[1:]
    return text + _best_batch(tops, largest) + _saturation(tops) + "."


def _at(machine: object, value: object) -> str:
    return f"{machine} at {fmt(value, 'img/s')}"


def machine(f: Finding, named=None) -> str:
    """One configuration across machines (`about["rows"]`: its fastest machine against each
    other one, the runner-up first): the tie rule, with the fastest-to-slowest ratio."""
    rows = f.about["rows"]
    top, config = rows[0], config_text({k[2:]: rows[0][k] for k in rows[0] if k[:2] == "a_"})
    fastest = _at(top["a_machine"], top["a_value"])
    if f.kind == "machine_tied":
        tied = [
            fastest,
            *(_at(r["b_machine"], r["b_value"]) for r in rows if r["verdict"] != "faster"),
        ]
        return (
            f"Across machines, {config} has no single fastest machine: "
            f"{names(tied, str)} are {ratio_text(ci_of(top))}."
        )
    slow = rows[-1]
    text = (
        f"Across machines, {config} runs fastest on {fastest}, {ratio_text(ci_of(slow))} than "
        f"the slowest machine, {slow['b_machine']}, at {fmt(slow['b_value'], 'img/s')}"
    )
    if len(rows) > 1:
        text += f"; {ratio_text(ci_of(top))} than the runner-up, {top['b_machine']}"
    return text + "."


WORDING = {
    "speedup": speedup,
    "batch_scaling": batch_scaling,
    "machine_fastest": machine,
    "machine_tied": machine,
}
