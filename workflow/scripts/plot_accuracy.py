"""Rule plot_accuracy: the per-epoch CSVs of one device's and model's training runs -> test
accuracy against epoch and against training time (nnperf.report.plots.accuracy)."""

from nnperf.core.jobs import logged_job
from nnperf.report.plots.accuracy import draw

with logged_job(snakemake.log[0], "plot_accuracy"):  # noqa: F821 - injected by Snakemake
    wildcards = snakemake.wildcards  # noqa: F821
    draw(
        list(snakemake.input.epochs),  # noqa: F821
        snakemake.output.figure,  # noqa: F821
        target=snakemake.params.target,  # noqa: F821
        title=f"{wildcards.device} {wildcards.model}: test accuracy while training",
    )
