"""Rule render_report: every table, JSON and figure of the study (and report.extra_results)
-> reports/{dataset}/summary.html and summary.md (nnperf.report.render)."""

from nnperf.core.contract import ReportRequest, from_dict
from nnperf.core.jobs import logged_job
from nnperf.report import results
from nnperf.report.render import render_files

with logged_job(snakemake.log[0], "render_report"):  # noqa: F821 - injected by Snakemake
    inputs, output = snakemake.input, snakemake.output  # noqa: F821
    request = from_dict(ReportRequest, snakemake.params.request)  # noqa: F821
    local = results.local_files(
        tables={name: inputs.get(name) for name in results.TABLE_NAMES},
        complexity=inputs.complexity,
        ceilings=inputs.ceilings,
        run_jsons=inputs.run_jsons,
        opprofiles=inputs.opprofiles,
        dataset=request.dataset,
    )
    render_files(request, local, list(inputs.figures), output.html, output.md)
