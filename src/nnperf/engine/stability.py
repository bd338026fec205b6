"""Was a timed window measured on a quiet machine? Samples around each window, and flags.

A throughput number is only as good as the conditions it was measured in: a CPU run that
shares its cores with another job loses most of its speed (measured: ~170 -> 1.1 img/s with
OpenMP threads oversubscribed), and a GPU that throttles or drops its clocks runs slower for
reasons that have nothing to do with the network. So every window records what it ran
beside, and `flag_windows()` marks the windows whose conditions were not clean:

* **Host load.** `HostSampler` reads the machine's CPU time (`/proc/stat`) and this run's own
  CPU time (its process and its DataLoader workers, `/proc/<pid>/stat`) before and after the
  window. The difference is the CPU time *other* processes used during the window, as an
  average number of cores (`other_cores`). The run itself keeps `own_threads` busy; when
  `own_threads + other_cores` exceeds the cores the machine has, runnable threads outnumber
  cores and the window was oversubscribed. A CPU-time average is used rather than a
  snapshot of runnable threads (`procs_running`, recorded too) because a snapshot taken at
  the window's edge sees the run's own spinning OpenMP workers and misses anything brief.
  Steal time (a hypervisor giving the VM's CPU to someone else) is recorded the same way.
* **GPU clocks and throttling** (NVML through `nvidia-ml-py`, when installed): SM and memory
  clocks at the window's end and the clock-event (throttle) reasons, of the GPU NVML finds
  by the UUID torch reports (`find_nvml_device`: CUDA's device numbers need not be NVML's).
  Thermal and hardware slowdowns flag a window; the software power cap is recorded as
  `power_capped` but does not flag on its own (a GPU at full load sits at its power limit by
  design), the clock rule below catches it when it costs speed. A window whose SM clock is
  more than 10% under the configuration's median is flagged.

psutil would read the same counters, but it is not a dependency and these are two files on
Linux; elsewhere (macOS) the host fields are null and nothing is flagged for host load.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Iterable, Mapping, Sequence

from nnperf.core.vocab import DISCARD_CAUSES, OVERLOAD_TOLERANCE_CORES, STEAL_LIMIT

CLOCK_DROP_LIMIT = 0.10
# NVML clock-event reasons that mean the GPU slowed itself down for protection.
THROTTLE_REASONS = {
    "sw_thermal": 0x20,
    "hw_slowdown": 0x8,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
}
POWER_CAP_REASON = 0x4


@dataclasses.dataclass(frozen=True)
class HostSnapshot:
    """Machine-wide and own CPU seconds at one instant (None where unreadable)."""

    busy_s: float | None
    steal_s: float | None
    total_s: float | None
    own_s: float | None


def _clock_ticks() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError, AttributeError):
        return 100


def read_proc_stat(text: str, ticks: int) -> tuple[float, float, float]:
    """(busy, steal, total) CPU seconds of the machine from /proc/stat's `cpu` line.

    busy counts user, nice, system, irq and softirq (guest time is already inside user);
    idle and iowait are idle; steal is time the hypervisor gave to another VM.
    """
    for line in text.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            values += [0] * (8 - len(values))
            user, nice, system, idle, iowait, irq, softirq, steal = values[:8]
            busy = user + nice + system + irq + softirq
            total = busy + idle + iowait + steal
            return busy / ticks, steal / ticks, total / ticks
    raise ValueError("no aggregate cpu line")


def process_cpu_seconds(stat_text: str, ticks: int) -> float:
    """utime + stime of one process (all its threads) from /proc/<pid>/stat."""
    # The command name (field 2) is in parentheses and may contain spaces.
    fields = stat_text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / ticks


def runnable_threads(text: str) -> int | None:
    """`procs_running` of /proc/stat: threads running or ready to run right now."""
    for line in text.splitlines():
        if line.startswith("procs_running"):
            return int(line.split()[1])
    return None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read()
    except OSError:
        return None


def own_pids() -> list[int]:
    """This process and its live children (DataLoader workers): the run's own CPU users."""
    import multiprocessing

    return [os.getpid()] + [child.pid for child in multiprocessing.active_children()]


class HostSampler:
    """CPU accounting around one window; see the module docstring. `extra_pids` are
    processes counted as the run's own besides this one and its children (a worker that a
    server forked, watched from the job that drives it)."""

    def __init__(self, own_threads: int, extra_pids: Sequence[int] = ()):
        self.own_threads = own_threads
        self.cores = os.cpu_count() or 1
        self.extra_pids = [pid for pid in extra_pids if pid is not None]
        self._ticks = _clock_ticks()

    def snapshot(self) -> HostSnapshot:
        stat = _read("/proc/stat")
        if stat is None:
            return HostSnapshot(None, None, None, None)
        busy, steal, total = read_proc_stat(stat, self._ticks)
        own = 0.0
        for pid in dict.fromkeys([*own_pids(), *self.extra_pids]):
            text = _read(f"/proc/{pid}/stat")
            if text is not None:
                own += process_cpu_seconds(text, self._ticks)
        return HostSnapshot(busy, steal, total, own)

    def window_fields(self, before: HostSnapshot, after: HostSnapshot, window_s: float) -> dict:
        """The host columns of one window's row."""
        fields = {
            "load_1m": _load_1m(),
            "other_cores": None,
            "steal_share": None,
            "runnable_threads": None,
            "own_threads": self.own_threads,
            "cores": self.cores,
        }
        if before.busy_s is None or after.busy_s is None or window_s <= 0:
            return fields
        others = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
        fields["other_cores"] = max(0.0, others / window_s)
        total = after.total_s - before.total_s
        fields["steal_share"] = (after.steal_s - before.steal_s) / total if total > 0 else 0.0
        stat = _read("/proc/stat")
        fields["runnable_threads"] = runnable_threads(stat) if stat else None
        return fields


def _load_1m() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


# `GpuSampler(uuid=...)` left out: the UUID is asked from torch.
_FROM_TORCH = object()


# Why a run's clocks are not simply its own GPU's found by UUID: the run document's
# `nvml.note` code, with `nvml.note_detail` (the UUID, index, order or error it names);
# the report words them.
NVML_NOTES = (
    "nvml_unavailable",  # detail: the exception's type
    "unknown_uuid",  # NVML knows no GPU or MIG device with torch's UUID: nothing read
    "mig_parent",  # a MIG device: its parent GPU's clocks, shared by every instance
    "mig_mode",  # a whole GPU in MIG mode: its clocks shared by its instances
    "visible_by_uuid",  # CUDA_VISIBLE_DEVICES names UUIDs and torch gave none: nothing read
    "device_order",  # no UUID and CUDA's order is not NVML's: nothing read
    "no_such_index",  # NVML has no GPU at that index: nothing read
    "found_by_index",  # no UUID from torch: found by its NVML index
)


@dataclasses.dataclass(frozen=True)
class NvmlDevice:
    """Which NVML device a run's clocks are read from: its handle (None: none is read),
    how it was found (`uuid`, `mig_parent`, `index`, or None), and why it is not simply
    the run's own GPU found by UUID (`NVML_NOTES`, None when it is) with its detail."""

    handle: object | None
    lookup: str | None
    note: str | None
    detail: str | int | None = None


def _bare_uuid(uuid: str) -> str:
    for prefix in ("GPU-", "MIG-"):
        if uuid.startswith(prefix):
            return uuid[len(prefix) :]
    return uuid


def find_nvml_device(nvml, index: int, uuid: str | None, environ: Mapping[str, str]) -> NvmlDevice:
    """The NVML device of CUDA device `index` whose UUID torch reported (`uuid`, None when
    it could not).

    By UUID where there is one: NVML numbers GPUs by PCI bus, CUDA by CUDA_DEVICE_ORDER
    (FASTEST_FIRST unless set) within CUDA_VISIBLE_DEVICES (indices, UUIDs or MIG ids), so
    an index can name another GPU. NVML wants the prefixed form: `GPU-<uuid>`, or for a MIG
    instance `MIG-<uuid>`, whose clocks and throttle reasons NVML reads from its parent GPU
    (shared with every instance on it), which is what is read then, with a note. Without a
    UUID, the index is mapped through an integer CUDA_VISIBLE_DEVICES only where CUDA's and
    NVML's numbering agree (CUDA_DEVICE_ORDER=PCI_BUS_ID, or a single GPU); elsewhere
    nothing is read: null clocks, never another GPU's.
    """
    if uuid:
        bare = _bare_uuid(uuid)
        try:
            handle = nvml.nvmlDeviceGetHandleByUUID(f"GPU-{bare}")
        except Exception:  # noqa: BLE001 - not a whole GPU: a MIG instance, or unknown
            handle = None
        if handle is not None:
            if _in_mig_mode(nvml, handle):
                return NvmlDevice(handle, "uuid", "mig_mode", f"GPU-{bare}")
            return NvmlDevice(handle, "uuid", None)
        try:
            instance = nvml.nvmlDeviceGetHandleByUUID(f"MIG-{bare}")
            parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(instance)
        except Exception:  # noqa: BLE001
            return NvmlDevice(None, None, "unknown_uuid", bare)
        return NvmlDevice(parent, "mig_parent", "mig_parent", f"MIG-{bare}")
    visible = [v.strip() for v in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if visible and not all(_is_int(v) for v in visible):
        return NvmlDevice(None, None, "visible_by_uuid", environ["CUDA_VISIBLE_DEVICES"])
    order = environ.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    try:
        single = int(nvml.nvmlDeviceGetCount()) == 1
    except Exception:  # noqa: BLE001
        single = False
    if order != "PCI_BUS_ID" and not single:
        return NvmlDevice(None, None, "device_order", order)
    physical = int(visible[index]) if index < len(visible) else index
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(physical)
    except Exception:  # noqa: BLE001
        return NvmlDevice(None, None, "no_such_index", physical)
    return NvmlDevice(handle, "index", "found_by_index", physical)


def _in_mig_mode(nvml, handle) -> bool:
    """Whether the GPU found runs in MIG mode: its clocks are shared by its instances."""
    try:
        current = nvml.nvmlDeviceGetMigMode(handle)[0]
    except Exception:  # noqa: BLE001 - no MIG support: not in MIG mode
        return False
    return current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


class GpuSampler:
    """SM/memory clocks and throttle reasons of the GPU a CUDA run uses (NVML), or nothing.

    The GPU is found by the UUID torch reports for `device_index` (`find_nvml_device`;
    `uuid` overrides it). `uuid` is the bare UUID, `lookup` how the NVML device was found
    and `note` why the clocks are not simply the run's own GPU's (a MIG device's parent
    GPU, an index lookup, or none found: then every field stays null): the run document
    should carry the note.
    """

    def __init__(self, device_index: int | None, *, uuid: str | None | object = _FROM_TORCH):
        self._handle = None
        self._nvml = None
        self.uuid: str | None = None
        self.lookup: str | None = None
        self.note: str | None = None
        self.note_detail: str | int | None = None
        if device_index is None:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - no NVML (no driver, no package): fields null
            self.note, self.note_detail = "nvml_unavailable", type(exc).__name__
            return
        if uuid is _FROM_TORCH:
            from nnperf.core.environment import device_uuid

            uuid = device_uuid(device_index)
        self.uuid = _bare_uuid(uuid) if uuid else None
        found = find_nvml_device(pynvml, device_index, self.uuid, os.environ)
        self._handle, self.lookup, self.note = found.handle, found.lookup, found.note
        self.note_detail = found.detail
        self._nvml = pynvml if found.handle is not None else None

    def record(self) -> dict:
        """What the run document says about where its clocks came from."""
        record = {"uuid": self.uuid, "nvml_lookup": self.lookup, "note": self.note}
        return record | ({"note_detail": self.note_detail} if self.note else {})

    def window_fields(self) -> dict:
        fields = {
            "sm_clock_mhz": None,
            "memory_clock_mhz": None,
            "throttle_reasons": None,
            "power_capped": None,
        }
        if self._handle is None:
            return fields
        nvml = self._nvml
        try:
            fields["sm_clock_mhz"] = float(
                nvml.nvmlDeviceGetClockInfo(self._handle, nvml.NVML_CLOCK_SM)
            )
            fields["memory_clock_mhz"] = float(
                nvml.nvmlDeviceGetClockInfo(self._handle, nvml.NVML_CLOCK_MEM)
            )
            getter = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
                nvml, "nvmlDeviceGetCurrentClocksThrottleReasons"
            )
            mask = int(getter(self._handle))
        except Exception:  # noqa: BLE001 - a query the driver refuses leaves its field null
            return fields
        fields["throttle_reasons"] = "|".join(
            name for name, bit in THROTTLE_REASONS.items() if mask & bit
        )
        fields["power_capped"] = bool(mask & POWER_CAP_REASON)
        return fields


# --- flags ----------------------------------------------------------------------------------


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def window_flag_reasons(row: dict, median_sm_clock: float | None) -> list[str]:
    """Why one window is not clean, as `vocab.UNSTABLE_REASONS` codes (empty when it is);
    `row` has WINDOW_CSV_COLUMNS, which hold the numbers each code is worded with."""
    reasons = []
    other, own, cores = (_number(row.get(k)) for k in ("other_cores", "own_threads", "cores"))
    if other is not None and own is not None and cores is not None:
        if own + other > cores + OVERLOAD_TOLERANCE_CORES:
            reasons.append("host_overloaded")
    steal = _number(row.get("steal_share"))
    if steal is not None and steal > STEAL_LIMIT:
        reasons.append("cpu_steal")
    throttle = row.get("throttle_reasons")
    if isinstance(throttle, str) and throttle:
        reasons.append("gpu_throttled")
    clock = _number(row.get("sm_clock_mhz"))
    if clock is not None and median_sm_clock and clock < (1 - CLOCK_DROP_LIMIT) * median_sm_clock:
        reasons.append("sm_clock_drop")
    return reasons


def flag_windows(rows: Sequence[dict]) -> list[dict]:
    """`rows` with `flagged` and `flag_reasons` filled in (new dicts; the input is kept)."""
    clocks = sorted(c for c in (_number(r.get("sm_clock_mhz")) for r in rows) if c is not None)
    median_clock = _median(clocks)
    flagged = []
    for row in rows:
        reasons = window_flag_reasons(row, median_clock)
        flagged.append({**row, "flagged": bool(reasons), "flag_reasons": "|".join(reasons)})
    return flagged


def discard_reasons(row: dict, earlier: Sequence[dict]) -> list[str]:
    """Why a window that just arrived is left out of the estimate (`vocab.DISCARD_CAUSES`
    codes; empty: it is used), judged once, on arrival, by the same flags as the windows
    table, its clock against the median of the configuration's windows so far (itself
    included): a disturbed window is replaced by another, so the decision cannot wait for
    the configuration's last window."""
    clocks = sorted(
        c for c in (_number(r.get("sm_clock_mhz")) for r in [*earlier, row]) if c is not None
    )
    reasons = window_flag_reasons(row, _median(clocks))
    if "host_overloaded" in reasons and not neighbour_load(row):
        reasons.remove("host_overloaded")
    return reasons


# /proc counts CPU time in ticks (1/USER_HZ s, 10 ms): the machine's busy time and the run's
# own are each read twice and truncated, so the other processes' share of a window is known
# to within a few ticks over its length: 40 ms of a 50 ms window is no neighbour's load.
TICK_SLACK = 4


def neighbour_load(row: dict, ticks_per_s: int | None = None) -> bool:
    """Whether other processes used more than the cores the run left free, by more than
    `OVERLOAD_TOLERANCE_CORES` and the counters' resolution over the window (`TICK_SLACK`).
    The `host_overloaded` flag also fires when the run alone asks for more threads than
    there are cores (DataLoader workers beside torch's pool, most of them waiting): every
    window of such a run is flagged alike, and measuring another would change nothing, so
    only a neighbour's load is a reason to discard a window."""
    other, own, cores, window_s = (
        _number(row.get(k)) for k in ("other_cores", "own_threads", "cores", "window_s")
    )
    if other is None or own is None or cores is None:
        return False
    resolution = 0.0
    if window_s and window_s > 0:
        resolution = TICK_SLACK / ((ticks_per_s or _clock_ticks()) * window_s)
    return other > max(0.0, cores - own) + OVERLOAD_TOLERANCE_CORES + resolution


def discard_counts(rows: Iterable[dict]) -> dict[str, int]:
    """Discarded windows by cause (every `vocab.DISCARD_CAUSES` code, 0 where none); a window
    with two causes counts under each."""
    counts = dict.fromkeys(DISCARD_CAUSES, 0)
    for row in rows:
        if row.get("discarded"):
            for reason in filter(None, str(row.get("discard_reasons") or "").split("|")):
                counts[reason] = counts.get(reason, 0) + 1
    return counts


def _median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def instability(rows: Iterable[dict]) -> tuple[bool, list[str], dict]:
    """(unstable, reasons, numbers) of a configuration from its flagged windows: each window
    reason code once, and the numbers it is worded with (`vocab.UNSTABLE_NUMBERS`): how many
    windows it hit of all, and its worst case."""
    rows = list(rows)
    hits: dict[str, list[dict]] = {}
    for row in rows:
        for reason in filter(None, str(row.get("flag_reasons") or "").split("|")):
            hits.setdefault(reason, []).append(row)
    numbers: dict = {"windows": len(rows)} if hits else {}
    for reason, flagged in hits.items():
        numbers[f"{reason}_windows"] = len(flagged)
    if "host_overloaded" in hits:
        worst = max(hits["host_overloaded"], key=lambda r: _number(r.get("other_cores")) or 0.0)
        numbers.update({k: _number(worst.get(k)) for k in ("other_cores", "own_threads", "cores")})
    if "cpu_steal" in hits:
        numbers["steal_share"] = max(
            _number(r.get("steal_share")) or 0.0 for r in hits["cpu_steal"]
        )
    if "gpu_throttled" in hits:
        seen = {c for r in hits["gpu_throttled"] for c in str(r["throttle_reasons"]).split("|")}
        numbers["throttle_reasons"] = "|".join(sorted(seen))
    if "sm_clock_drop" in hits:
        numbers["sm_clock_min_mhz"] = min(
            _number(r.get("sm_clock_mhz")) for r in hits["sm_clock_drop"]
        )
        clocks = sorted(c for c in (_number(r.get("sm_clock_mhz")) for r in rows) if c is not None)
        numbers["sm_clock_median_mhz"] = _median(clocks)
    return bool(hits), list(hits), numbers
