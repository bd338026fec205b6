"""Rule training_table: every training run's summary JSON, with the timed runs' throughput of
the same configuration -> results/tables/{dataset}/training.csv (nnperf.report.training_table)."""

from nnperf.core.jobs import logged_job
from nnperf.report.training_table import write_training_table

with logged_job(snakemake.log[0], "training_table"):  # noqa: F821 - injected by Snakemake
    write_training_table(
        list(snakemake.input.runs),  # noqa: F821
        snakemake.input.summary,  # noqa: F821
        snakemake.output.table,  # noqa: F821
    )
