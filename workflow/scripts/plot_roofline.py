"""Rules plot_roofline and plot_roofline_steps: one roofline figure, of one configuration or of
every step on a device (nnperf.report.plots.roofline)."""

from nnperf.core.contract import FigureRequest, from_dict
from nnperf.core.jobs import logged_job
from nnperf.report.plots.roofline import write_figure

with logged_job(snakemake.log[0], snakemake.rule):  # noqa: F821 - injected by Snakemake
    params, inputs = snakemake.params, snakemake.input  # noqa: F821
    write_figure(
        from_dict(FigureRequest, {"kind": params.kind, **params.figure}),
        inputs.points,
        inputs.ceilings,
        inputs.get("kernels"),  # absent when nothing was profiled
        snakemake.output.figure,  # noqa: F821
        inputs.get("profiles"),
    )
