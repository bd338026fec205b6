"""Rule compare_machines: this machine's tables and report.extra_results -> the merged summary
and the throughput-per-machine figure (nnperf.report.plots.machines)."""

from nnperf.core.contract import ReportRequest, from_dict
from nnperf.core.jobs import logged_job
from nnperf.report import results
from nnperf.report.plots.machines import compare_machines

with logged_job(snakemake.log[0], "compare_machines"):  # noqa: F821 - injected by Snakemake
    inputs, output = snakemake.input, snakemake.output  # noqa: F821
    request = from_dict(ReportRequest, snakemake.params.request)  # noqa: F821
    tables = {name: inputs[name] for name in ("summary", "runs", "environment")}
    local = results.local_files(tables=tables, dataset=request.dataset)
    compare_machines(request, local, output.table, output.figure)
