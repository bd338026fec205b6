"""Rules plot_throughput, plot_breakdown, plot_speedup: one figure of the timed runs for one
device and model, from summary.csv (comparisons.csv for the speedups; runs.csv for the
per-process points)
(nnperf.report.plots.runs).
"""

from nnperf.core.contract import FigureRequest, from_dict
from nnperf.core.jobs import logged_job
from nnperf.report.plots.runs import draw

with logged_job(snakemake.log[0], snakemake.rule):  # noqa: F821 - injected by Snakemake
    draw(
        # The figure's keys are its path's wildcards: kind, device, model.
        from_dict(FigureRequest, snakemake.params.figure),  # noqa: F821
        snakemake.input.get("comparisons") or snakemake.input.summary,  # noqa: F821
        snakemake.output.png,  # noqa: F821
        snakemake.input.get("runs"),  # noqa: F821 - only the throughput figure has it
    )
