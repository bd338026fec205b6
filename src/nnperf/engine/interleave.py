"""Configurations that are compared, measured together: their worker processes alternate.

A speedup is a ratio of two throughputs. Measured minutes apart, the ratio carries whatever
changed in between: a machine that slows by a tenth while it warms up, a neighbour's job,
a clock step. Measured by processes that alternate in a balanced order (A B B A A B ...), the
two configurations see the same drift and the same neighbours, round by round, and process i
of A is paired with process i of B: the paired interval (`nnperf.core.ratios.paired_ratio`)
cancels what a pair shares.

One job measures a *group*: the configurations of one model x device, every batch size,
precision and variant of it (a batch size measured apart is only comparable unpaired). Each
keeps its own budget (`timing.max_seconds` counts only the time its own processes run:
`manager.MeasurementRun`), its own stopping rule and its own files. The group adds one rule
on top (`comparisons`): the comparisons it serves (each variant against the baseline, each
precision against fp32, each batch size against the smallest, the other keys alike) must
each be *resolved* (the ratio's interval excludes 1, or lies within the CI target of 1)
before a configuration that met its own target stops for good: while one is not, a
configuration that met its target measures on, round by round beside its partner, as long
as a process fits both budgets.

Until a comparison cannot get there: when the rounds its paired interval needs (from the
round-to-round spread of its log ratios, `stopping.comparison_out_of_reach`) exceed the
rounds both members' budgets still fit, it stops holding them, and its row's verdict says
`out_of_reach`. A configuration that no open comparison holds any longer stops by its own
rule (`stopping.unreachable_target`, which keeps its cautious lower bound: judged at the
measured spread it cut configurations that went on to meet their targets): that is how a
group on a noisy machine ends once what it can say is said, instead of at its budget.

From the second round on, the members that can share a process run in one, their windows
taking turns (`nnperf.engine.sharing`, under `timing.pairing: window`): a comparison whose
members shared two rounds or more is paired on those rounds alone (`paired_rates`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Sequence

from nnperf.core import layout, ratios
from nnperf.core.contract import RunRequest
from nnperf.core.vocab import REFERENCE_PRECISION, REFERENCE_VARIANT
from nnperf.engine import sharing, stopping
from nnperf.engine.manager import Measurement, MeasurementRun
from nnperf.engine.processes import Worker, worker_starter
from nnperf.engine.worker import WorkerJob, start_method

PRECISION, VARIANT, BATCH = "precision", "variant", "batch_size"


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Member `a` against member `b` (the reference) of a group; `kind` is what differs."""

    a: int
    b: int
    kind: str


def comparisons(requests: Sequence[RunRequest]) -> list[Comparison]:
    """The comparisons a group's report states, each between configurations that differ in
    one key: each variant against the reference variant, each precision against the
    reference precision (`nnperf.core.vocab`), and each batch size against the group's
    smallest (for two batch sizes, every batch comparison the report states; beyond two,
    its leader-against-the-rest rows are still paired by round, but do not hold the group
    open)."""
    smallest = min((r.batch_size for r in requests), default=None)
    found = []
    for i, a in enumerate(requests):
        for j, b in enumerate(requests):
            differ = {k for k in (PRECISION, VARIANT, BATCH) if getattr(a, k) != getattr(b, k)}
            if differ == {VARIANT} and b.variant == REFERENCE_VARIANT:
                found.append(Comparison(i, j, VARIANT))
            if differ == {PRECISION} and b.precision == REFERENCE_PRECISION:
                found.append(Comparison(i, j, PRECISION))
            if differ == {BATCH} and b.batch_size == smallest:
                found.append(Comparison(i, j, BATCH))
    return found


def balanced_order(members: Sequence[int], round_index: int) -> list[int]:
    """Even rounds forward, odd rounds backward: A B | B A | A B ... (each member's mean
    position is the same, so a linear drift cancels in a pair of rounds)."""
    ordered = list(members)
    return ordered if round_index % 2 == 0 else ordered[::-1]


def round_rates(result: Measurement) -> dict[int, float]:
    """Throughput of each of a measurement's processes, by the round it ran in."""
    by_process = stopping.process_throughputs(result.samples())
    return {
        int(record["round"]): by_process[record["process"]]
        for record in result.processes
        if record.get("round") is not None and record["process"] in by_process
    }


def round_partners(result: Measurement) -> dict[int, list[str]]:
    """The members each of a measurement's rounds shared its process with (none: alone)."""
    return {
        int(record["round"]): list(record.get("shared_with") or [])
        for record in result.processes
        if record.get("round") is not None
    }


@dataclasses.dataclass(frozen=True)
class Member:
    """A group member's measurement under its name (`layout.member_name`)."""

    name: str
    result: Measurement


def paired_rates(a: Member, b: Member) -> tuple[list[float], list[float], str]:
    """A's and B's throughputs in the rounds their ratio is paired on, and the grain
    (`ratios.pairing_rounds`: the rounds they shared a process in, where there are enough)."""
    rates_a, rates_b = round_rates(a.result), round_rates(b.result)
    partners_a, partners_b = round_partners(a.result), round_partners(b.result)
    rounds, grain = ratios.pairing_rounds(
        {r: partners_a.get(r, []) for r in rates_a},
        {r: partners_b.get(r, []) for r in rates_b},
        a.name,
        b.name,
    )
    return [rates_a[r] for r in rounds], [rates_b[r] for r in rounds], grain


def ratio_of(a: Member, b: Member) -> ratios.RatioCI:
    """A's throughput over B's, paired by round (`paired_rates`)."""
    rates_a, rates_b, _ = paired_rates(a, b)
    return ratios.paired_ratio(rates_a, rates_b)


def tolerance(a: RunRequest, b: RunRequest) -> float:
    """What counts as "no difference" for a comparison: the stricter CI target of the two."""
    return min(a.target_ci, b.target_ci)


@dataclasses.dataclass
class GroupResult:
    """What a group's job produced: one measurement per member, and each comparison."""

    measurements: list[Measurement]
    comparisons: list[dict]
    rounds: int


def run_group(
    requests: Sequence[RunRequest],
    *,
    workflow_dir=None,
    method: str | None = None,
    clock: Callable[[], float] = time.time,
    start_worker: Callable[[WorkerJob], Worker] | None = None,
    start_shared: sharing.SharedStarter | None = None,
    watch_host: bool = True,
    model_factory: Callable | None = None,
    data=None,
) -> GroupResult:
    """Measure `requests` with interleaved worker processes (module docstring); with
    `model_factory` and `data` (picklable) every member's workers use them, as in
    `manager.run_measurement`, instead of loading them by name. Members that may share a
    process do so from the second round on (`nnperf.engine.sharing`) where
    `timing.pairing` is `window` and shared processes can be started: always with real
    workers, with `start_worker` (a rehearsal's) only where `start_shared` is given too."""
    method = method or start_method()
    for request in requests:
        stopping.check_steps(
            request.training.warmup_steps,
            request.training.timed_steps,
            request.settings.compile,
            request.device,
        )
    if start_worker is None:
        start_worker = worker_starter(method)
        start_shared = sharing.shared_starter(start_worker)
    runs = [
        MeasurementRun(
            request,
            start_worker,
            clock=clock,
            watch_host=watch_host,
            method=method,
            workflow_dir=workflow_dir,
            model_factory=model_factory,
            data=data,
            count_pauses=True,
        )
        for request in requests
    ]
    share = start_shared is not None and all(
        r.timing.pairing == ratios.WINDOW_GRAIN for r in requests
    )
    names = sharing.member_names(requests)
    pairs = comparisons(requests)
    given_up: dict[Comparison, dict] = {}
    round_index = 0
    while True:
        held = _open_comparisons(runs, names, pairs, given_up)
        _reopen_for_comparisons(runs, held)
        active = [i for i, run in enumerate(runs) if not run.finished]
        if not active:
            break
        # Process 0 is each member's own (`sharing`'s docstring says why).
        veterans = [i for i in active if runs[i].process > 0]
        units = [[i] for i in active if i not in veterans]
        units += sharing.sharing_units(requests, veterans) if share else [[i] for i in veterans]
        for unit in balanced_order(sorted(units), round_index):
            if len(unit) == 1:
                runs[unit[0]].run_process(round_index)
            elif not sharing.run_shared(runs, unit, round_index, start_shared, names):
                share = False
        round_index += 1
    measurements = [run.close() for run in runs]
    rows = _comparison_rows(requests, measurements, pairs, given_up)
    return GroupResult(measurements, rows, round_index)


def paired_log_ratios(a: Member, b: Member) -> list[float]:
    """log(A/B) of each paired round: what `ratio_of`'s interval is built from."""
    rates_a, rates_b, _ = paired_rates(a, b)
    return [math.log(x / y) for x, y in zip(rates_a, rates_b)]


def _open_comparisons(
    runs: Sequence[MeasurementRun],
    names: Sequence[str],
    pairs: Sequence[Comparison],
    given_up: dict,
) -> list[Comparison]:
    """Before each round: the comparisons that still hold their members, unresolved and
    within reach. One that cannot be resolved in the rounds both members' budgets still
    fit (`stopping.comparison_out_of_reach`) is recorded in `given_up` with its numbers and
    holds nobody: its members stop by their own rules. With no round left to fit, the record
    stands as it was (a comparison the budget simply ended is `unresolved`, not given up);
    one resolved after all leaves it."""
    held = []
    for pair in pairs:
        a, b = runs[pair.a], runs[pair.b]
        if a.result.status != "ok" or b.result.status != "ok":
            continue
        limit = tolerance(a.request, b.request)
        member_a, member_b = Member(names[pair.a], a.result), Member(names[pair.b], b.result)
        if ratio_of(member_a, member_b).resolved(limit):
            given_up.pop(pair, None)
            continue
        left = min(a.processes_left(), b.processes_left())
        if left > 0:
            logs = paired_log_ratios(member_a, member_b)
            why = stopping.comparison_out_of_reach(logs, limit, left)
            if why is None:
                given_up.pop(pair, None)
            else:
                given_up[pair] = why
        if pair not in given_up:
            held.append(pair)
    return held


def _reopen_for_comparisons(
    runs: Sequence[MeasurementRun], pairs: Sequence[Comparison]
) -> list[int]:
    """Before each round: the members that stopped by their own rule but have an open
    comparison (`_open_comparisons`) measure on, where their partner measures in the same
    round (it is still running, or another process fits its budget too): a process without
    its partner pairs with nothing."""

    def available(run: MeasurementRun) -> bool:
        return not run.finished or run.can_continue()

    chosen: set[int] = set()
    for pair in pairs:
        if available(runs[pair.a]) and available(runs[pair.b]):
            chosen.update(i for i in (pair.a, pair.b) if runs[i].finished)
    for i in sorted(chosen):
        runs[i].reopen()
    return sorted(chosen)


def out_of_reach_with(rows: Sequence[dict], request: RunRequest, group: str) -> list[str]:
    """The members `request` has an `out_of_reach` comparison with (run JSON
    `comparisons_out_of_reach`), named as in `group` (`layout.name_in_group`): how the
    report, which builds comparisons.csv from the runs, learns that the engine gave such a
    comparison up."""

    def name(key) -> str:
        return layout.name_in_group(group, key["precision"], key["batch_size"], key["variant"])

    own = name(request.key.as_dict())
    found = set()
    for row in rows:
        names = [name(row["a"]), name(row["b"])]
        if row["verdict"] == ratios.OUT_OF_REACH and own in names:
            found.add(names[1 - names.index(own)])
    return sorted(found)


def _comparison_rows(
    requests: Sequence[RunRequest], measurements: Sequence[Measurement], pairs, given_up: dict
) -> list[dict]:
    """comparisons.json's rows: codes and numbers. A comparison given up as out of reach
    and still unresolved at the end says so in its verdict (`ratios.OUT_OF_REACH`), with
    the rounds it would have needed and the rounds that fit when it was given up; `grain`
    is the pairs' (`ratios.pairing_rounds`)."""
    rows = []
    members = [Member(n, m) for n, m in zip(sharing.member_names(requests), measurements)]
    for pair in pairs:
        a, b = requests[pair.a], requests[pair.b]
        rates_a, rates_b, grain = paired_rates(members[pair.a], members[pair.b])
        ci = ratios.paired_ratio(rates_a, rates_b)
        measured = measurements[pair.a].status == "ok" and measurements[pair.b].status == "ok"
        rows.append(
            {
                "kind": pair.kind,
                "a": a.key.as_dict(),
                "b": b.key.as_dict(),
                "measured": measured,
                **ci.as_dict("ratio"),
                "grain": grain,
                "resolved": measured and ci.resolved(tolerance(a, b)),
                "tolerance": tolerance(a, b),
                "verdict": ci.verdict(tolerance(a, b)) if measured else "unmeasured",
                "rounds_needed": None,
                "rounds_fit": None,
            }
        )
        if measured and rows[-1]["verdict"] == "unresolved" and pair in given_up:
            rows[-1].update(verdict=ratios.OUT_OF_REACH, **given_up[pair])
    return rows
