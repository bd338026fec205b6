"""Rule comparisons_table: this machine's tables and report.extra_results -> comparisons.csv
(nnperf.report.comparisons)."""

from nnperf.core.jobs import logged_job
from nnperf.report import results

with logged_job(snakemake.log[0], "comparisons_table"):  # noqa: F821 - injected by Snakemake
    inputs = snakemake.input  # noqa: F821
    names = ("summary", "runs", "environment", "training")
    tables = {name: inputs[name] for name in names if name in inputs.keys()}
    local = results.local_files(tables=tables, dataset=snakemake.wildcards.dataset)  # noqa: F821
    results.write_comparisons(local, inputs.extra_results, snakemake.output.table)  # noqa: F821
