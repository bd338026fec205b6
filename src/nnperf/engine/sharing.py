"""Compared configurations in one worker process, their timed windows taking turns.

A group's comparisons are paired process by process (`nnperf.engine.interleave`): A's process
beside B's, round after round. On a CPU machine most of what differs between two processes a
few seconds apart is the host's capacity changing over seconds (benchmarks/
noise_timescales.py), and that stays in every pair: on a 2-vCPU VM the pairs' ratios spread
by 13-14% (benchmarks/alternation_grain.py). Held in one process, the two trainings' windows
alternate a second apart (A B | B A | ...) and see the same host: the same number of pairs
spread by 3-5%, so a comparison resolves in a fraction of the rounds. What sharing a process
costs was measured beside it: each training's throughput shared over alone was within +/-5%
(1.025, 0.997, 1.004, every interval holding 1), and a switch between trainings 0.993.

Which trainings may share one is `nnperf.core.variant.sharing_key`. A group's first round
runs every member alone: process 0 records the environment, bounds the one-time steps and
ends a configuration that cannot fit its budget (`driver.Driver`), all of which assume the
process is the configuration's own. From the second round on, the members that may share
run in one process per round: each builds and warms up in turn, then their windows take
turns in balanced order, every member judged after each of its windows by its own stopping
rule, leaving the process (its loader windows, its closing record) when the rule ends its
process, until none is left. Each member's budget counts only its own time in it: the
others' turns are pauses (`MeasurementRun.resume`/`pause`).

A shared process that fails (killed, out of memory, crashed) is not the configurations'
fault until shown to be: the members it left without a result lose that process
(`nnperf.engine.losses`) and measure the round alone, and the group measures alone from then
on; a second loss of the same slot fails the configuration as it would alone. A member
whose deadline passes ends as it would alone (`overran`); the others' processes ended with
it, and they go on in the next round.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from nnperf.core import layout
from nnperf.core.contract import RunRequest
from nnperf.core.jobs import warn
from nnperf.core.variant import sharing_key
from nnperf.engine import losses, stopping
from nnperf.engine.manager import MeasurementRun
from nnperf.engine.processes import Overrun, Worker, WorkerLost
from nnperf.engine.worker import WorkerJob

# How a group starts a shared process: the members' jobs in, one handle per member out.
SharedStarter = Callable[[Sequence[WorkerJob]], list[Worker]]


class SharingFailed(RuntimeError):
    """A shared process said something other than a member's message (out of memory, an
    error): it failed as a whole."""


class SharedProcess:
    """The parent's end of one shared worker process (protocol: `nnperf.engine.worker`):
    messages are sorted by member as they arrive."""

    def __init__(self, worker: Worker, members: int):
        self.worker = worker
        self.waiting: list[list[tuple]] = [[] for _ in range(members)]
        self.done: set[int] = set()
        self.killed = False

    def receive(self, member: int, deadline_unix: float) -> tuple:
        while not self.waiting[member]:
            message = self.worker.receive(deadline_unix)
            if message[0] != "member":
                self.kill()
                raise SharingFailed(f"shared process: {message[0]} {message[1:]!r:.300}")
            self.waiting[int(message[1])].append(tuple(message[2]))
        return self.waiting[member].pop(0)

    def kill(self) -> None:
        if not self.killed:
            self.killed = True
            self.worker.kill()


class MemberView(Worker):
    """One member's view of a shared process, with the interface of a worker of its own:
    what the driver (`driver.Driver`) talks to."""

    def __init__(self, shared: SharedProcess, member: int, index: int, started_at_unix: float):
        self.shared, self.member, self.index = shared, member, index
        self.started_at_unix = started_at_unix

    @property
    def pid(self) -> int | None:
        return self.shared.worker.pid

    def receive(self, deadline_unix: float):
        return self.shared.receive(self.member, deadline_unix)

    def send(self, command: str) -> None:
        self.shared.worker.send([command, self.member])

    def finish(self, deadline_unix: float) -> dict:
        self.send("stop")
        message = self.receive(deadline_unix)
        if message[0] != "done":
            raise SharingFailed(f"shared process: {message[0]} instead of a closing record")
        self.shared.done.add(self.member)
        return message[1]

    def kill(self) -> None:
        self.shared.kill()

    def join(self) -> None:
        pass

    def ended_how(self) -> str:
        return self.shared.worker.ended_how()

    def exit_code(self) -> int | None:
        return self.shared.worker.exit_code()


def shared_starter(start_worker: Callable[[WorkerJob], Worker]) -> SharedStarter:
    """Shared processes started as `start_worker` starts a worker: the first member's job
    carries the others as partners."""

    def start(jobs: Sequence[WorkerJob]) -> list[Worker]:
        first, *others = jobs
        partners = tuple((other.request, other.process) for other in others)
        job = dataclasses.replace(first, collect_environment=False, partners=partners)
        shared = SharedProcess(start_worker(job), len(jobs))
        started = shared.worker.started_at_unix
        return [MemberView(shared, m, j.process, started) for m, j in enumerate(jobs)]

    return start


def sharing_units(requests: Sequence[RunRequest], members: Sequence[int]) -> list[list[int]]:
    """`members` (indices into `requests`) as the round's processes: those with the same
    `sharing_key` in one, each other alone; in the order of their first member."""
    units: dict[object, list[int]] = {}
    for i in members:
        request = requests[i]
        key = sharing_key(request.device, request.precision, request.settings)
        units.setdefault(("alone", i) if key is None else key, []).append(i)
    return sorted(units.values(), key=lambda unit: unit[0])


def member_names(requests: Sequence[RunRequest]) -> list[str]:
    """The group's members by name (`layout.name_in_group`: with the batch size where the
    group measures several)."""
    group = layout.batch_sizes_key(r.batch_size for r in requests)
    return [layout.name_in_group(group, r.precision, r.batch_size, r.variant) for r in requests]


def run_shared(
    runs: Sequence[MeasurementRun],
    unit: Sequence[int],
    round_index: int,
    start_shared: SharedStarter,
    names: Sequence[str],
) -> bool:
    """Measure one process of each of `unit`'s members (indices into `runs`) in one shared
    worker process (module docstring). False when it failed: its members that were left
    without their process ran this round alone instead."""
    members = [runs[i] for i in unit]
    members[0].resume()
    views = start_shared([run.job() for run in members])
    records = [
        run.open_record(view, round_index, shared_with=[names[j] for j in unit if j != i])
        for i, run, view in zip(unit, members, views)
    ]
    members[0].pause()
    ended: dict[int, stopping.Action] = {}
    try:
        _measure(members, views, records, ended, round_index)
    except (WorkerLost, SharingFailed) as failure:
        views[0].kill()
        _alone_after_failure(members, views, records, ended, failure, round_index)
        return False
    finally:
        views[0].kill()
        for record in records:
            record.setdefault("ended_at_unix", members[0].clock())
    for position, run in enumerate(members):
        run.end_process(ended[position])
    return True


def _measure(members, views, records, ended: dict[int, stopping.Action], round_index: int):
    """Each member's start in turn, then their windows in balanced order until every one's
    process has ended (`ended`: the action that ended it, by position). The order turns
    with the round as well, so no member is always the one whose two windows run back to
    back (the benchmark measured a switch at 0.98-0.99 of a window after itself)."""
    start_ended: dict[int, float] = {}
    for position, (run, view, record) in enumerate(zip(members, views, records)):
        if position > 0:
            view.started_at_unix = record["started_at_unix"] = run.clock()
        action = _turn(run, view, record, run.driver.start)
        start_ended[position] = run.clock()
        if action is not None:
            _leave(position, action, members, records, ended)
            if record["status"] == "killed":
                return _end_with(members, records, ended)
    turn = 0
    while len(ended) < len(members):
        in_process = [p for p in range(len(members)) if p not in ended]
        for position in in_process if (turn + round_index) % 2 == 0 else in_process[::-1]:
            run, view, record = members[position], views[position], records[position]
            if turn == 0:
                # The partners' warm-ups and first windows since its own: not what
                # starting a process costs it (`stopping.process_cost`).
                record["waited_s"] = run.clock() - start_ended[position]
            action = _turn(run, view, record, run.driver.window)
            if action is None:
                continue
            _leave(position, action, members, records, ended)
            if record["status"] == "killed":
                return _end_with(members, records, ended)
        turn += 1
    return None


def _turn(run: MeasurementRun, view: Worker, record: dict, step) -> stopping.Action | None:
    """One step of one member, on its own clock; a missed deadline is its `overran`."""
    run.resume()
    try:
        return step(view, record)
    except Overrun as overrun:
        return run.driver.overran(view, record, overrun.waited_s)
    finally:
        run.pause()


def _leave(position: int, action, members, records, ended: dict) -> None:
    ended[position] = action
    records[position]["ended_at_unix"] = members[position].clock()


def _end_with(members, records, ended: dict) -> None:
    """The process was killed at one member's deadline: the others' processes end with it,
    with what they measured, and they go on in the next round where one fits."""
    for position, run in enumerate(members):
        if position in ended:
            continue
        records[position]["status"] = "killed"
        if run.processes_left() > 0:
            _leave(position, stopping.Action("process"), members, records, ended)
        else:
            _leave(position, run.driver.budget_stop(), members, records, ended)


def _alone_after_failure(members, views, records, ended, failure, round_index: int) -> None:
    """The shared process failed: each member it left without a result loses that process
    and measures the round alone (a second loss of the slot fails it, as alone)."""
    for position, (run, view, record) in enumerate(zip(members, views, records)):
        if position in ended and record["status"] != "killed":
            run.end_process(ended[position])
            continue
        exit_code = failure.exit_code if isinstance(failure, WorkerLost) else None
        lost = WorkerLost(view.index, exit_code, f"in a shared process: {failure}")
        if run.losses.get(run.process) is not None:
            raise RuntimeError(losses.second_loss(lost, run.losses[run.process])) from None
        run.losses[run.process] = lost
        losses.forget_process(run.result, lost, record)
        warn(losses.loss_line(lost, run.request))
        run.run_process(round_index)
