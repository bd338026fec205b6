"""Window conditions: /proc parsing against hand-made text, and the flag rules by hand."""

from __future__ import annotations

import os
import sys

import pytest

from nnperf import stability

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
    assert reasons == [
        "host overloaded: other processes used 1.0 of 2 cores beside this run's 2 threads"
    ]
    # A GPU run keeps two threads busy on a 16-core host: 10 other cores are no problem ...
    assert stability.window_flag_reasons(row(own_threads=2, cores=16, other_cores=10), None) == []
    # ... 15 are.
    assert stability.window_flag_reasons(row(own_threads=2, cores=16, other_cores=15), None)


def test_steal_throttling_and_clock_drops_are_flagged():
    assert stability.window_flag_reasons(row(steal_share=0.2), None) == ["CPU steal 20%"]
    throttled = stability.window_flag_reasons(row(throttle_reasons="hw_slowdown|sw_thermal"), None)
    assert throttled == ["GPU throttled (hw_slowdown, sw_thermal)"]
    assert stability.window_flag_reasons(row(throttle_reasons=""), None) == []
    dropped = stability.window_flag_reasons(row(sm_clock_mhz=1500), median_sm_clock=1980)
    assert dropped == ["SM clock 1500 MHz, 24% under the configuration's median 1980 MHz"]
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
    unstable, reasons = stability.instability(rows)
    assert unstable
    assert reasons == [
        "2 of 4 windows: host overloaded: other processes used 1.4 of 2 cores beside this run's 2 threads",
        "1 of 4 windows: SM clock 1600 MHz, 19% under the configuration's median 1980 MHz",
    ]
    assert stability.instability(stability.flag_windows([row(), row()])) == (False, [])


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
