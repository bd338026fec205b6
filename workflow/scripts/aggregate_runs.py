"""Rule aggregate_runs: every run JSON -> runs.csv, windows.csv and summary.csv
(nnperf.report.aggregate)."""

from nnperf.core.contract import TablesRequest, from_dict
from nnperf.core.jobs import logged_job
from nnperf.report.aggregate import write_tables

with logged_job(snakemake.log[0], "aggregate_runs"):  # noqa: F821 - injected by Snakemake
    write_tables(
        from_dict(TablesRequest, snakemake.params.request),  # noqa: F821
        snakemake.input.runs,  # noqa: F821
        snakemake.output.runs,  # noqa: F821
        snakemake.output.windows,  # noqa: F821
        snakemake.output.summary,  # noqa: F821
    )
