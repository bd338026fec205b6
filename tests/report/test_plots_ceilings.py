"""The ceilings figure: the working-set sweep."""

from __future__ import annotations

import numpy as np
import pytest

from nnperf.core.errors import NnperfError
from nnperf.core.files import write_json
from nnperf.report.format import fmt_bytes, fmt_si
from nnperf.report.plots import ceilings as plots
from nnperf.report.plots.style import save_png

KIB, MIB = 1024, 1024**2

# A ceilings document in the format rule `ceilings` writes (values of an H100 SXM run
# rounded; the sweep shortened).
H100_DOC = {
    "device": "cuda",
    "device_name": "NVIDIA H100 80GB HBM3",
    "threads": 16,
    "measured": {
        "gemm_flop_s": {"fp32": 51e12, "tf32": 380e12, "fp16": 700e12, "bf16": 720e12},
        "memory_bandwidth_bytes_s": 2.9e12,
        "memory_bandwidth_kernel": "copy",
        "sweep": [
            {
                "working_set_bytes": 64 * KIB,
                "bandwidth_bytes_s": 20e12,
                "bandwidth_bytes_s_median": 19e12,
            },
            {
                "working_set_bytes": 4 * MIB,
                "bandwidth_bytes_s": 9e12,
                "bandwidth_bytes_s_median": 8.5e12,
            },
            {
                "working_set_bytes": 256 * MIB,
                "bandwidth_bytes_s": 3.0e12,
                "bandwidth_bytes_s_median": 2.9e12,
            },
        ],
    },
    "datasheet": {
        "key": "h100_sxm",
        "name": "NVIDIA H100 SXM5 80GB",
        "derived": False,
        "flop_s": {"fp32": 67e12, "tf32": 494.5e12, "fp16": 989.5e12, "bf16": 989.5e12},
        "memory_bandwidth_bytes_s": 3.35e12,
        "source": "NVIDIA H100 datasheet",
    },
    "caches": [
        {
            "name": "L2",
            "level": 2,
            "type": "Unified",
            "size_bytes": 50 * MIB,
            "shared_cpu_count": None,
        }
    ],
}


@pytest.mark.parametrize(
    "value,unit,text",
    [
        (989.5e12, "FLOP/s", "990 TFLOP/s"),
        (3.35e12, "B/s", "3.35 TB/s"),
        (192.2e9, "FLOP/s", "192 GFLOP/s"),
        (5.0, "B/s", "5 B/s"),
        (0.5, "B/s", "0.5 B/s"),
    ],
)
def test_format_si(value, unit, text):
    assert fmt_si(value, unit) == text


@pytest.mark.parametrize(
    "value,text",
    [
        (48 * KIB, "48 KiB"),
        (MIB, "1 MiB"),
        (32 * MIB, "32 MiB"),
        (1024**3, "1 GiB"),
        (512, "512 B"),
    ],
)
def test_format_bytes(value, text):
    assert fmt_bytes(value) == text


def test_sweep_figure_content(tmp_path):
    fig = plots.sweep_figure(H100_DOC)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    best = ax.get_lines()[0]
    np.testing.assert_allclose(best.get_xdata(), [64 * KIB, 4 * MIB, 256 * MIB])
    np.testing.assert_allclose(best.get_ydata(), [20e3, 9e3, 3e3])  # GB/s
    labels = ax.get_legend_handles_labels()[1]
    assert "main memory, copy (STREAM counting): 2.9 TB/s" in labels
    assert "datasheet memory: 3.35 TB/s" in labels
    assert any(t.get_text() == "L2 50 MiB" for t in ax.texts)
    assert "NVIDIA H100 80GB HBM3" in ax.get_title()
    out = tmp_path / "figures" / "sweep.png"
    save_png(fig, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    assert list(out.parent.iterdir()) == [out]  # no temporary file left behind


def test_sweep_figure_marks_private_caches_per_core():
    doc = {
        **H100_DOC,
        "datasheet": None,
        "caches": [
            {"name": "L1d", "level": 1, "size_bytes": 48 * KIB, "shared_cpu_count": 1},
            {"name": "L3", "level": 3, "size_bytes": 32 * MIB, "shared_cpu_count": 2},
        ],
    }
    ax = plots.sweep_figure(doc).axes[0]
    assert sorted(t.get_text() for t in ax.texts) == ["L1d 48 KiB per core", "L3 32 MiB"]
    assert not any(label.startswith("datasheet") for label in ax.get_legend_handles_labels()[1])


def test_draw_reads_the_json_and_writes_the_png(tmp_path):
    """Rule plot_ceilings: one ceilings JSON in, its sweep PNG out, nothing else left."""
    ceilings_json = tmp_path / "ceilings" / "cuda.json"
    write_json(ceilings_json, H100_DOC)
    out = tmp_path / "figures" / "cuda_sweep.png"
    plots.draw(ceilings_json, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    assert list(out.parent.iterdir()) == [out]
    with pytest.raises(NnperfError, match="absent.json: file not found"):
        plots.draw(tmp_path / "absent.json", tmp_path / "figures" / "absent.png")
    assert list(out.parent.iterdir()) == [out]
