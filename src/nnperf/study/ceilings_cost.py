"""What the ceilings stage costs, from what `ceilings:` asks of it.

Rule `ceilings` (`nnperf.roofline.ceilings.measure_ceilings`) times three things, each as
`nnperf.roofline.microbench` does (warm-up calls, calibration windows of 1, 2, 4 ... calls
until one lasts `MIN_TRIAL_S`, then `ceilings.trials` windows, each after an untimed call):
square GEMMs per precision the device runs and per size of `ceilings.gemm_sizes` (at most
`GEMM_BUDGET_S` a precision), STREAM copy and triad over arrays of `ceilings.bandwidth_bytes`,
and the working-set sweep from `ceilings.sweep_min_bytes` to `sweep_max_bytes`. So its cost is
the sum over those kernels of calls x seconds per call: the number of calls follows from the
settings exactly (`nnperf.roofline.compute_roofs.gemm_cost_s`), and the seconds per call from
what the machine recorded (`recordings/ceilings_<machine>.json`: each GEMM size's call, the
STREAM bandwidth, the sweep's bandwidth per working set), projected at the same rate to a size
it did not record. The rest of a recorded stage (buffers filled, the cache probe, the GEMM
probes) is its recorded duration less that sum for its own settings: one figure per machine
(`Recording.setup_s`), so the recorded settings plan at exactly the recorded duration.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources

from nnperf.core import contract
from nnperf.core.vocab import SUPPORTED_PRECISIONS
from nnperf.roofline import ceilings, compute_roofs, memory_roofs


@dataclass(frozen=True)
class Recording:
    """A machine's recorded ceilings stage, as the cost model reads it."""

    source: str
    device: str
    duration_s: float
    settings: dict
    # {precision: {size: seconds of one call}}
    gemm_call_s: dict[str, dict[int, float]]
    stream_bandwidth: dict[str, float]
    # [(working-set bytes, bytes/s)] of the sweep, ascending
    sweep_bandwidth: tuple[tuple[int, float], ...]

    @property
    def setup_s(self) -> float:
        """The recorded duration less the modelled measurements of its own settings."""
        return max(0.0, self.duration_s - self.measurements_s(self.recorded_settings()))

    def recorded_settings(self) -> contract.CeilingsSettings:
        s = self.settings
        return contract.CeilingsSettings(
            gemm_sizes=list(s["gemm_sizes"]),
            trials=int(s["trials"]),
            bandwidth_bytes=int(s["bandwidth_bytes"]),
            sweep_min_bytes=int(s["sweep_min_bytes"]),
            sweep_max_bytes=int(s["sweep_max_bytes"]),
        )

    # --- the parts ---------------------------------------------------------------------
    def gemm_s(self, settings: contract.CeilingsSettings) -> float:
        sizes = sorted(set(settings.gemm_sizes or ceilings.DEFAULT_GEMM_SIZES[self.device]))
        min_trial_s = ceilings.MIN_TRIAL_S[self.device]
        total = 0.0
        for precision in SUPPORTED_PRECISIONS[self.device]:
            recorded = self.gemm_call_s.get(precision)
            if not recorded:
                continue  # a precision the machine skipped: seconds, not a measurement
            refresh = 1 if len(sizes) > 1 else 0
            spent = 0.0
            for size in sizes:
                nearest = min(recorded, key=lambda s: abs(math.log(s / size)))
                call_s = compute_roofs.projected_call_s(recorded[nearest], nearest, size)
                cost = _calls(call_s, ceilings.WARMUP_CALLS, settings.trials, min_trial_s, refresh)
                if spent + cost > compute_roofs.GEMM_BUDGET_S[self.device]:
                    break  # skipped, with every larger size, as measure_gemm does
                spent += cost
            total += spent
        return total

    def stream_s(self, settings: contract.CeilingsSettings) -> float:
        array_bytes = settings.bandwidth_bytes or int(self.settings["bandwidth_bytes"])
        n = array_bytes // memory_roofs.ELEMENT_BYTES
        min_trial_s = ceilings.MIN_TRIAL_S[self.device]
        return sum(
            _calls(
                memory_roofs.stream_bytes(kernel, n) / bandwidth,
                ceilings.WARMUP_CALLS,
                settings.trials,
                min_trial_s,
                1,
            )
            for kernel, bandwidth in self.stream_bandwidth.items()
        )

    def sweep_s(self, settings: contract.CeilingsSettings) -> float:
        sets = memory_roofs.sweep_working_sets(
            settings.sweep_min_bytes, settings.sweep_max_bytes, ceilings.SWEEP_STEPS_PER_OCTAVE
        )
        per_call = ceilings.SWEEP_BYTES_PER_CALL[self.device]
        min_trial_s = ceilings.MIN_TRIAL_S[self.device]
        total = 0.0
        for working_set in sets:
            _, bandwidth = min(
                self.sweep_bandwidth, key=lambda point: abs(math.log(point[0] / working_set))
            )
            repeats = memory_roofs.sweep_repeats(working_set, per_call)
            call_s = memory_roofs.sweep_call_bytes(working_set, repeats) / bandwidth
            total += _calls(call_s, ceilings.WARMUP_CALLS, settings.trials, min_trial_s, 1)
        return total

    def measurements_s(self, settings: contract.CeilingsSettings) -> float:
        return self.gemm_s(settings) + self.stream_s(settings) + self.sweep_s(settings)


def _calls(call_s: float, warmup: int, trials: int, min_trial_s: float, refresh: int) -> float:
    """Seconds of one kernel's measurement (`microbench.time_interleaved`): warm-up calls,
    the calibration windows (none when one call fills a window), `trials` windows each after
    `refresh` untimed calls."""
    from nnperf.roofline.microbench import window_iters

    iters = window_iters(call_s, min_trial_s)
    calibration = 0 if iters == 1 else 2 * iters - 1
    return (warmup + calibration + trials * (refresh + iters)) * call_s


def load_recording(machine: str) -> Recording:
    """`recordings/ceilings_<machine>.json` (shipped with nnperf.engine)."""
    text = (
        resources.files("nnperf.engine")
        .joinpath("recordings")
        .joinpath(f"ceilings_{machine}.json")
        .read_text("utf-8")
    )
    data = json.loads(text)
    return Recording(
        source=data["source"],
        device=data["device"],
        duration_s=float(data["duration_s"]),
        settings=data["settings"],
        gemm_call_s={
            precision: {int(size): float(s) for size, s in sizes.items()}
            for precision, sizes in data["gemm_call_s"].items()
        },
        stream_bandwidth={k: float(v) for k, v in data["stream_bandwidth_bytes_s"].items()},
        sweep_bandwidth=tuple(
            sorted((int(b), float(v)) for b, v in data["sweep_bandwidth_bytes_s"])
        ),
    )
