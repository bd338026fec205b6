"""Window conditions: /proc parsing against hand-made text, and the flag rules by hand."""

from __future__ import annotations

import os
import sys

import pytest

from nnperf.engine import stability

PROC_STAT = """cpu  1000 20 300 5000 40 5 6 70 0 0
cpu0 500 10 150 2500 20 2 3 35 0 0
intr 12345
ctxt 999
btime 1700000000
procs_running 3
procs_blocked 0
"""


def test_proc_stat_busy_steal_total():
    busy, steal, total = stability.read_proc_stat(PROC_STAT, ticks=100)
    assert busy == pytest.approx((1000 + 20 + 300 + 5 + 6) / 100)
    assert steal == pytest.approx(0.70)
    assert total == pytest.approx((1331 + 5000 + 40 + 70) / 100)
    assert stability.runnable_threads(PROC_STAT) == 3
    with pytest.raises(ValueError):
        stability.read_proc_stat("intr 1\n", ticks=100)


def test_process_cpu_seconds_reads_past_a_name_with_spaces_and_parentheses():
    fields = ["S"] + ["0"] * 10 + ["250", "50"] + ["0"] * 30
    text = "1234 (python (my job)) " + " ".join(fields)
    assert stability.process_cpu_seconds(text, ticks=100) == pytest.approx(3.0)


def row(**fields):
    base = {"other_cores": 0.0, "own_threads": 2, "cores": 2, "steal_share": 0.0}
    return {**base, **fields}


def test_clean_window_is_not_flagged():
    assert stability.window_flag_reasons(row(other_cores=0.1), None) == []


def test_oversubscribed_host_is_flagged():
    reasons = stability.window_flag_reasons(row(other_cores=1.0), None)
    assert reasons == ["host_overloaded"]
    # A GPU run keeps two threads busy on a 16-core host: 10 other cores are no problem ...
    assert stability.window_flag_reasons(row(own_threads=2, cores=16, other_cores=10), None) == []
    # ... 15 are.
    assert stability.window_flag_reasons(row(own_threads=2, cores=16, other_cores=15), None)


def test_steal_throttling_and_clock_drops_are_flagged():
    assert stability.window_flag_reasons(row(steal_share=0.2), None) == ["cpu_steal"]
    throttled = stability.window_flag_reasons(row(throttle_reasons="hw_slowdown|sw_thermal"), None)
    assert throttled == ["gpu_throttled"]
    assert stability.window_flag_reasons(row(throttle_reasons=""), None) == []
    dropped = stability.window_flag_reasons(row(sm_clock_mhz=1500), median_sm_clock=1980)
    assert dropped == ["sm_clock_drop"]
    assert stability.window_flag_reasons(row(sm_clock_mhz=1800), median_sm_clock=1980) == []


def test_unreadable_fields_flag_nothing():
    empty = {
        k: None for k in ("other_cores", "own_threads", "cores", "steal_share", "sm_clock_mhz")
    }
    assert stability.window_flag_reasons(empty, None) == []


def test_configuration_instability_summarises_each_kind_once_with_its_worst_case():
    rows = stability.flag_windows(
        [
            row(other_cores=0.6, sm_clock_mhz=1980),
            row(other_cores=1.4, sm_clock_mhz=1980),
            row(sm_clock_mhz=1600),
            row(sm_clock_mhz=1980),
        ]
    )
    assert [r["flagged"] for r in rows] == [True, True, True, False]
    assert [r["flag_reasons"] for r in rows] == [
        "host_overloaded",
        "host_overloaded",
        "sm_clock_drop",
        "",
    ]
    unstable, reasons, numbers = stability.instability(rows)
    assert unstable
    assert reasons == ["host_overloaded", "sm_clock_drop"]
    assert numbers == {
        "windows": 4,
        "host_overloaded_windows": 2,
        "sm_clock_drop_windows": 1,
        "other_cores": 1.4,
        "own_threads": 2,
        "cores": 2,
        "sm_clock_min_mhz": 1600,
        "sm_clock_median_mhz": 1980,
    }
    assert stability.instability(stability.flag_windows([row(), row()])) == (False, [], {})


def test_no_nvml_means_null_gpu_fields():
    assert stability.GpuSampler(None).window_fields() == {
        "sm_clock_mhz": None,
        "memory_clock_mhz": None,
        "throttle_reasons": None,
        "power_capped": None,
    }


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_host_sampler_sees_its_own_cpu_time_as_its_own():
    sampler = stability.HostSampler(own_threads=1)
    before = sampler.snapshot()
    total = 0
    for i in range(3_000_000):  # ~0.2 s of this process's own CPU time
        total += i
    after = sampler.snapshot()
    assert after.own_s - before.own_s > 0.05
    fields = sampler.window_fields(before, after, window_s=0.2)
    assert fields["cores"] == os.cpu_count() and fields["own_threads"] == 1
    assert fields["other_cores"] >= 0 and 0 <= fields["steal_share"] <= 1


# --- which GPU NVML reads ---------------------------------------------------------------------

# Two H100s in NVML's (PCI bus) order, told apart by their SM clocks; a MIG instance on the first.
GPU_A = "5b3a0c2e-1111-2222-3333-444455556666"
GPU_B = "7c4b1d3f-aaaa-bbbb-cccc-ddddeeeeffff"
MIG_ON_A = "0e2f4a6c-9999-8888-7777-666655554444"
SM_CLOCK_MHZ = {GPU_A: 1980.0, GPU_B: 1410.0}


class FakeNvml:
    """pynvml's calls the sampler makes, on the machine above; `calls` records the lookups."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, gpus=(GPU_A, GPU_B), mig_mode=()):
        self.gpus = list(gpus)
        self.mig_mode = set(mig_mode)
        self.calls = []

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        self.calls.append(("index", index))
        return ("gpu", self.gpus[index])

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.calls.append(("uuid", uuid))
        kind, _, bare = uuid.partition("-")
        if kind == "GPU" and bare in self.gpus:
            return ("gpu", bare)
        if kind == "MIG" and bare == MIG_ON_A and GPU_A in self.mig_mode:
            return ("mig", bare)
        raise RuntimeError("NVMLError_NotFound: Not Found")

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle):
        assert handle == ("mig", MIG_ON_A)
        return ("gpu", GPU_A)

    def nvmlDeviceGetMigMode(self, handle):
        return [int(handle[1] in self.mig_mode), 0]

    def nvmlDeviceGetClockInfo(self, handle, clock):
        assert handle[0] == "gpu", "NVML reads no clocks from a MIG instance handle"
        return SM_CLOCK_MHZ[handle[1]] if clock == self.NVML_CLOCK_SM else 2619.0

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return 0x4  # the software power cap


class FakeUuid:
    """torch's `_CUuuid`: printed as the bare UUID."""

    def __init__(self, text):
        self.text = text

    def __str__(self):
        return self.text


def fake_machine(monkeypatch, nvml, torch_uuid, environ):
    """pynvml replaced by `nvml`; torch's device 0 reports `torch_uuid` (None: a torch
    without `uuid`); the environment holds exactly `environ`'s CUDA variables."""
    import types

    import torch

    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    props = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3")
    if torch_uuid is not None:
        props.uuid = FakeUuid(torch_uuid)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize(
    ("visible", "order"),
    [
        # A UUID list: the old index lookup read NVML's GPU 0, another GPU.
        (f"GPU-{GPU_B}", None),
        # An integer list in CUDA's default order (FASTEST_FIRST): "0" need not be NVML's 0.
        ("0", None),
        ("1,0", "PCI_BUS_ID"),
    ],
)
def test_the_gpu_is_found_by_the_uuid_torch_reports(monkeypatch, visible, order):
    nvml = FakeNvml()
    environ = {"CUDA_VISIBLE_DEVICES": visible, **({"CUDA_DEVICE_ORDER": order} if order else {})}
    fake_machine(monkeypatch, nvml, GPU_B, environ)
    sampler = stability.GpuSampler(0)
    assert nvml.calls == [("uuid", f"GPU-{GPU_B}")]  # never by index
    assert sampler.record() == {"uuid": GPU_B, "nvml_lookup": "uuid", "note": None}
    assert sampler.window_fields() == {
        "sm_clock_mhz": 1410.0,
        "memory_clock_mhz": 2619.0,
        "throttle_reasons": "",
        "power_capped": True,
    }


def test_a_mig_device_reads_its_parent_gpus_clocks_and_says_so(monkeypatch):
    nvml = FakeNvml(mig_mode=[GPU_A])
    fake_machine(monkeypatch, nvml, MIG_ON_A, {"CUDA_VISIBLE_DEVICES": f"MIG-{MIG_ON_A}"})
    sampler = stability.GpuSampler(0)
    assert nvml.calls == [("uuid", f"GPU-{MIG_ON_A}"), ("uuid", f"MIG-{MIG_ON_A}")]
    assert sampler.lookup == "mig_parent"
    assert (sampler.note, sampler.note_detail) == ("mig_parent", f"MIG-{MIG_ON_A}")
    assert sampler.window_fields()["sm_clock_mhz"] == 1980.0


def test_a_whole_gpu_in_mig_mode_is_noted(monkeypatch):
    fake_machine(monkeypatch, FakeNvml(mig_mode=[GPU_A]), GPU_A, {})
    sampler = stability.GpuSampler(0)
    assert (sampler.lookup, sampler.note, sampler.note_detail) == (
        "uuid",
        "mig_mode",
        f"GPU-{GPU_A}",
    )
    assert sampler.window_fields()["sm_clock_mhz"] == 1980.0


def test_a_uuid_nvml_does_not_know_reads_nothing(monkeypatch):
    nvml = FakeNvml()
    fake_machine(monkeypatch, nvml, "00000000-0000-0000-0000-000000000000", {})
    sampler = stability.GpuSampler(0)
    assert sampler.window_fields()["sm_clock_mhz"] is None
    assert (sampler.note, sampler.note_detail) == (
        "unknown_uuid",
        "0" * 8 + "-0000" * 3 + "-" + "0" * 12,
    )
    assert not any(kind == "index" for kind, _ in nvml.calls)


@pytest.mark.parametrize(
    ("gpus", "environ", "clock", "lookup", "note"),
    [
        # Without a UUID from torch, an index is trusted only where the orders agree.
        (
            (GPU_A, GPU_B),
            {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
            1410.0,
            "index",
            ("found_by_index", 1),
        ),
        ((GPU_B,), {}, 1410.0, "index", ("found_by_index", 0)),
        (
            (GPU_A, GPU_B),
            {"CUDA_VISIBLE_DEVICES": "1"},
            None,
            None,
            ("device_order", "FASTEST_FIRST"),
        ),
        (
            (GPU_A, GPU_B),
            {"CUDA_VISIBLE_DEVICES": f"GPU-{GPU_B}", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
            None,
            None,
            ("visible_by_uuid", f"GPU-{GPU_B}"),
        ),
    ],
)
def test_without_a_uuid_an_index_only_where_it_names_the_same_gpu(
    monkeypatch, gpus, environ, clock, lookup, note
):
    nvml = FakeNvml(gpus=gpus)
    fake_machine(monkeypatch, nvml, None, environ)
    sampler = stability.GpuSampler(0)
    assert sampler.window_fields()["sm_clock_mhz"] == clock
    assert (sampler.lookup, (sampler.note, sampler.note_detail)) == (lookup, note)
    assert all(kind == "index" for kind, _ in nvml.calls)


def test_the_uuid_can_be_given(monkeypatch):
    nvml = FakeNvml()
    fake_machine(monkeypatch, nvml, GPU_A, {})
    sampler = stability.GpuSampler(0, uuid=f"GPU-{GPU_B}")
    assert sampler.uuid == GPU_B and nvml.calls == [("uuid", f"GPU-{GPU_B}")]


def test_without_nvml_the_note_says_so(monkeypatch):
    class NoDriver(FakeNvml):
        def nvmlInit(self):
            raise RuntimeError("NVMLError_LibraryNotFound")

    fake_machine(monkeypatch, NoDriver(), GPU_A, {})
    sampler = stability.GpuSampler(0)
    assert (sampler.note, sampler.note_detail) == ("nvml_unavailable", "RuntimeError")
    assert sampler.window_fields()["sm_clock_mhz"] is None


def test_without_the_nvml_package_a_cuda_run_records_no_clocks_and_runs_on(monkeypatch):
    """What `nnperf doctor` promises when it warns about a missing pynvml: no crash, null
    clocks, and the run document's note says why."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    sampler = stability.GpuSampler(0)
    assert sampler.record() == {
        "uuid": None,
        "nvml_lookup": None,
        "note": "nvml_unavailable",
        "note_detail": "ModuleNotFoundError",
    }
    assert sampler.window_fields() == {
        "sm_clock_mhz": None,
        "memory_clock_mhz": None,
        "throttle_reasons": None,
        "power_capped": None,
    }
    # Windows without clocks are flagged for nothing GPU-side.
    assert stability.window_flag_reasons(sampler.window_fields(), None) == []


def test_device_uuid_is_none_without_cuda(monkeypatch):
    import torch

    from nnperf.core.environment import device_uuid

    def no_cuda(index):
        raise RuntimeError("Found no NVIDIA driver on your system")

    monkeypatch.setattr(torch.cuda, "get_device_properties", no_cuda)
    assert device_uuid(0) is None
