"""The parent's side of one worker process of a measurement: it runs the worker to its end
under the configuration's budget (`nnperf.engine.manager.MeasurementRun` starts the workers
and keeps the measurement; this drives each one).

Every wait has a deadline, and a worker that overruns it is killed: that is how a hopeless
configuration (a 13 s bf16 step on a CPU without bf16 arithmetic) ends in seconds with status
`over_budget` and the step time it showed. A worker's start (`start`: its data, build and
warm-up) and each timed window (`window`) are steps of their own, so that the members of a
shared process (`nnperf.engine.sharing`) can take turns.
"""

from __future__ import annotations

from nnperf.core.contract import RunRequest
from nnperf.engine import loader, stability, stopping
from nnperf.engine.processes import Overrun, Worker, raise_for

# A worker past its deadline gets this much grace before it is killed (seconds, and a share
# of the budget): a deadline is a projection, and killing a step that was about to end
# wastes all of it.
GRACE_S = 2.0
GRACE_SHARE = 0.1
# Seconds a worker may take to start (the first one starts the fork server: imports).
STARTUP_TIMEOUT_S = 180.0


def _grace(request: RunRequest) -> float:
    return GRACE_S + GRACE_SHARE * request.timing.max_seconds


class Driver:
    """The parent's side of one measurement: runs each worker to its end under the budget.

    The budget (`timing.max_seconds`) starts when process 0 is up with its data and is
    extended by process 0's one-time steps, which have bounds of their own
    (`TimingSettings.one_time_bound`); later processes' one-time steps are part of what
    another process costs, which the stopping rule weighs before starting one.
    """

    # `result` is the `manager.Measurement` it fills in (manager imports this module).
    def __init__(self, request: RunRequest, result, clock, watch_host: bool):
        self.request = request
        self.result = result
        self.clock = clock
        self.watch_host = watch_host
        self.one_time = stopping.one_time_kinds(request.settings.compile, request.device)

    def budget_end(self) -> float:
        result = self.result
        return (
            result.budget_start_unix
            + result.one_time_s
            + result.paused_s
            + result.loader_s
            + self.request.timing.max_seconds
        )

    def hard_end(self) -> float:
        return self.budget_end() + _grace(self.request)

    def spent_s(self, at: float | None = None) -> float:
        """What the configuration has spent of `timing.max_seconds` by `at` (now when None):
        process 0's one-time steps, the pauses while others ran and the loader windows are
        not part of it."""
        result = self.result
        at = self.clock() if at is None else at
        return at - result.budget_start_unix - result.one_time_s - result.paused_s - result.loader_s

    def budget_stop(self) -> stopping.Action:
        return stopping.Action(
            "stop",
            "budget",
            {"spent_s": self.spent_s(), "budget_s": self.request.timing.max_seconds},
        )

    def drive(self, worker: Worker, record: dict) -> stopping.Action:
        """Run one worker to its end; returns the action that ended it ("process": start
        the next one; "stop": the measurement is over)."""
        try:
            action = self.start(worker, record)
            while action is None:
                action = self.window(worker, record)
            return action
        except Overrun as overrun:
            return self.overran(worker, record, overrun.waited_s)

    def start(self, worker: Worker, record: dict) -> stopping.Action | None:
        """A worker's start: its data, its build and its warm-up; an action where it ended
        there (out of memory, over budget), None when it is ready for its windows. A missed
        deadline raises Overrun (`overran` says what it means)."""
        result, first = self.result, worker.index == 0
        record["phase"] = "startup"
        # Starting the fork server (its imports, once) is not the configuration's cost:
        # the budget's clock starts when the first worker is up and has its data.
        if first:
            message = worker.receive(self.clock() + STARTUP_TIMEOUT_S)
            result.budget_start_unix = self.clock()
        else:
            message = worker.receive(self.hard_end())
        record["pid"] = worker.pid
        if message[0] != "loaded":
            return self._ended_early(message, record)
        result.data_info = message[1]
        message = worker.receive(self.hard_end())
        if message[0] != "ready":
            return self._ended_early(message, record)
        record["first_step_at_unix"] = message[1]["first_step_at_unix"]
        if message[1]["environment"] is not None:
            result.environment = message[1]["environment"]
        record["fixed_cost_s"] = message[1]["first_step_at_unix"] - worker.started_at_unix
        verdict = self._warm_up(worker, record)
        if verdict is None:
            record["phase"] = "steady"
        return verdict

    def window(self, worker: Worker, record: dict) -> stopping.Action | None:
        """One timed window, judged; None to measure another in this process, else the
        action that ended the process (after its loader windows and closing record)."""
        result, request = self.result, self.request
        worker.send("window")
        message = worker.receive(self.hard_end())
        if message[0] != "window":
            return self._ended_early(message, record)
        window = message[1]
        # A disturbed window stays in the table but not in the estimate: the stopping rule,
        # which counts clean windows, asks for another in its place (under
        # `timing.disturbed_windows: keep` the table's flags alone say so).
        remeasure = request.timing.disturbed_windows == "remeasure"
        reasons = stability.discard_reasons(window, result.windows) if remeasure else []
        window.update(discarded=bool(reasons), discard_reasons="|".join(reasons))
        result.windows.append(window)
        result.steps.extend(message[2])
        action = stopping.next_action(
            result.samples(),
            current_process=worker.index,
            elapsed_s=self.spent_s(),
            process_cost_s=stopping.process_cost(
                result.processes, result.windows, bool(request.settings.compile)
            ),
            timing=request.timing,
            target_ci=request.target_ci,
            window_cost_s=max(float(w["window_s"]) for w in result.windows),
        )
        if action.kind == "window":
            return None
        if self._measure_loader(worker, record):
            closing = worker.finish(self.hard_end())
            _close_record(record, closing, result)
        return action

    def _measure_loader(self, worker: Worker, record: dict) -> bool:
        """The process's loader windows, within the configuration's allowance
        (`nnperf.engine.loader`); False when the worker did not survive them (killed at
        their deadline, or out of memory), so it has no closing record to give. Its timed
        windows stand either way."""
        result, request = self.result, self.request
        own = 0
        while (
            own < loader.WINDOWS_PER_PROCESS
            and not result.loader_unavailable
            and loader.next_window_fits(result.loader_s, result.loader_windows, request.timing)
        ):
            started = self.clock()
            # Its batches are a timed window's less the training, so the longest timed
            # window (and what is left of the allowance) bounds it.
            longest = max((float(w["window_s"]) for w in result.windows), default=0.0)
            left = max(0.0, loader.allowance_s(request.timing) - result.loader_s)
            worker.send("loader")
            try:
                message = worker.receive(started + max(left, longest) + _grace(request))
            except Overrun:
                record["loader_status"] = "killed"
                return False
            finally:
                result.loader_s += self.clock() - started
            if message[0] == "oom":
                record["loader_status"] = "oom"
                return False
            if message[0] != "loader":
                raise_for(message, worker.index)
            if message[1] is None:
                result.loader_unavailable = True
                break
            result.loader_windows.append(message[1])
            own += 1
        return True

    def overran(self, worker: Worker, record: dict, waited_s: float) -> stopping.Action:
        """The action after `worker` missed its deadline and was killed."""
        result = self.result
        record["status"] = "killed"
        has_windows = any(w["process"] == worker.index for w in result.windows)
        phase = record["phase"]
        if worker.index == 0 and not has_windows and phase in stopping.ONE_TIME_KINDS:
            bound, _ = self.request.timing.one_time_bound(phase)
            self._over_budget_one_time(phase, waited_s, bound)
        elif worker.index == 0 and not has_windows:
            warmed = len(record["warmup_step_time_s"])
            self._over_budget(waited_s, lower_bound=True, warmed=warmed)
        else:
            result.notes.append(("process_stopped_at_budget", {"stopped_after_s": waited_s}))
        return self.budget_stop()

    def _warm_up(self, worker: Worker, record: dict) -> stopping.Action | None:
        """Receive the warm-up steps. The first ones carry one-time costs (`self.one_time`):
        each is bounded on its own and predicts nothing. For process 0, the steady ones
        after them end the measurement as over_budget as soon as even the fastest of them
        says its minimal measurement (rest of warm-up + min_windows windows) cannot fit."""
        result, request, clock = self.result, self.request, self.clock
        warmup_steps = request.training.warmup_steps
        needed_after = request.timing.min_windows * request.training.timed_steps
        first = worker.index == 0
        steady: list[float] = []
        # The parent watches the host while process 0 warms up: a step slowed by a competing
        # load must not pass for the configuration's own speed unremarked.
        host = stability.HostSampler(own_threads=0, extra_pids=[worker.pid])
        before, waited_from = self._host_snapshot(host), clock()
        for done in range(1, warmup_steps + 1):
            kind = self.one_time[done - 1] if done <= len(self.one_time) else "steady"
            record["phase"] = kind
            deadline = self.hard_end()
            if first and kind != "steady":
                bound, _ = request.timing.one_time_bound(kind)
                deadline = clock() + bound + GRACE_S
            elif first:
                steps_left = warmup_steps - done + 1 + needed_after
                now = clock()
                deadline = min(deadline, now + (self.budget_end() - now) / steps_left + GRACE_S)
            try:
                message = worker.receive(deadline)
            except Overrun:
                if first:
                    self._note_host_load(host, before, waited_from)
                raise
            if message[0] != "warmup":
                return self._ended_early(message, record)
            seconds = float(message[1])
            record["warmup_step_time_s"].append(seconds)
            if kind != "steady":
                record["one_time_step_time_s"][kind] = seconds
                if first:
                    result.one_time_s += seconds
                continue
            steady.append(seconds)
            if not first:
                continue
            now = clock()
            step_s = min(steady)
            steps_left = warmup_steps - done + needed_after
            if now + steps_left * step_s > self.budget_end():
                worker.kill()
                record["status"] = "killed"
                self._over_budget(step_s, lower_bound=False, warmed=done)
                self._note_host_load(host, before, waited_from)
                return stopping.Action("stop", "over_budget")
            before, waited_from = self._host_snapshot(host), now
        return None

    def _host_snapshot(self, host):
        return host.snapshot() if self.watch_host else None

    def _note_host_load(self, host, before, waited_from: float) -> None:
        """Flag an over-budget verdict reached while other processes loaded the host."""
        if not self.watch_host or before is None:
            return
        fields = host.window_fields(before, host.snapshot(), self.clock() - waited_from)
        other = fields["other_cores"]
        if other is not None and other > stability.OVERLOAD_TOLERANCE_CORES:
            self.result.notes.append(
                (
                    "host_loaded_while_timed",
                    {"host_load_other_cores": other, "cores": fields["cores"]},
                )
            )

    def _over_budget(self, step_s: float, lower_bound: bool, warmed: int) -> None:
        """End the measurement as over budget: after `warmed` warm-up steps, one steady step
        took `step_s` (at least, when `lower_bound`: the step was cut off)."""
        result, request = self.result, self.request
        training, timing = request.training, request.timing
        steps_left = (
            max(0, training.warmup_steps - warmed) + timing.min_windows * training.timed_steps
        )
        result.status = result.stop_reason = "over_budget"
        result.over_budget_phase = "steady"
        result.single_step_time_s = step_s
        result.single_step_time_is_lower_bound = lower_bound
        result.stop_numbers = {
            "step_s": step_s,
            "step_lower_bound": lower_bound,
            "steps_left": steps_left,
            "min_windows": timing.min_windows,
            "timed_steps": training.timed_steps,
            "needed_s": steps_left * step_s,
            "left_s": max(0.0, self.budget_end() - self.clock()),
            "budget_s": timing.max_seconds,
        }

    def _over_budget_one_time(self, kind: str, waited_s: float, bound: float) -> None:
        """End the measurement as over budget because a one-time step of process 0 outran its
        own bound: no steady step was measured, so there is no step time to report."""
        result = self.result
        result.status = result.stop_reason = "over_budget"
        result.over_budget_phase = kind
        result.single_step_time_s = None
        result.single_step_time_is_lower_bound = False
        result.stop_numbers = {"one_time_s": waited_s, "bound_s": bound}

    def _ended_early(self, message, record) -> stopping.Action:
        """A worker sent oom or an error instead of what was expected."""
        result = self.result
        if message[0] == "oom":
            record["status"] = "oom"
            if record["process"] == 0 and not result.windows:
                result.status, result.error = "oom", message[1]
            else:
                result.notes.append(("process_oom", {}))
            return self.budget_stop()
        raise_for(message, record["process"])
        raise AssertionError("unreachable")


def _close_record(record: dict, closing: dict, result) -> None:
    kept = (
        "loss_start",
        "peak_memory_device_bytes",
        "peak_memory_device_warmup_bytes",
        "peak_memory_host_bytes",
        "optimizer_impl",
    )
    # .get: a replayed worker (nnperf.engine.rehearsal) reports no warm-up peak.
    record.update({key: closing.get(key) for key in kept})
