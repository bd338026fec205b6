"""Rule comparisons_table: this machine's tables and report.extra_results -> comparisons.csv
(nnperf.report.comparisons)."""

from nnperf.core.contract import ReportRequest, from_dict
from nnperf.core.jobs import logged_job
from nnperf.report import results

with logged_job(snakemake.log[0], "comparisons_table"):  # noqa: F821 - injected by Snakemake
    inputs = snakemake.input  # noqa: F821
    names = ("summary", "runs", "environment", "training")
    tables = {name: inputs[name] for name in names if name in inputs.keys()}
    request = from_dict(ReportRequest, snakemake.params.request)  # noqa: F821
    local = results.local_files(tables=tables, dataset=request.dataset)
    # The folders (params), not their files (the input list that dates them).
    results.write_comparisons(local, request.extra_results, snakemake.output.table)  # noqa: F821
