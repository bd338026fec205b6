"""Rules plot_operators and plot_memory: one figure of one operator profile, from its
document and its operators or memory table (nnperf.report.plots.operators)."""

from nnperf.core.jobs import logged_job
from nnperf.report.plots.operators import draw

with logged_job(snakemake.log[0], snakemake.rule):  # noqa: F821 - injected by Snakemake
    draw(
        snakemake.params.kind,  # noqa: F821
        snakemake.input.document,  # noqa: F821
        snakemake.input.table,  # noqa: F821
        snakemake.output.figure,  # noqa: F821
    )
