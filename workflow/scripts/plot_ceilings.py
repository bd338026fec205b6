"""Rule plot_ceilings: the working-set sweep of one ceilings JSON as a PNG."""

from nnperf.core.jobs import logged_job
from nnperf.report.plots import ceilings

with logged_job(snakemake.log[0], "plot_ceilings"):  # noqa: F821 - injected by Snakemake
    ceilings.draw(snakemake.input.ceilings, snakemake.output.png)  # noqa: F821
