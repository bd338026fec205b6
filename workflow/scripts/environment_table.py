"""Rule environment_table: the environment record of every run JSON -> one table
(nnperf.report.machines)."""

from nnperf.core.jobs import logged_job
from nnperf.report.machines import write_environment_table

with logged_job(snakemake.log[0], "environment_table"):  # noqa: F821 - injected by Snakemake
    write_environment_table(list(snakemake.input.runs), snakemake.output.table)  # noqa: F821
