"""Rule profile_request: the ProfileStepRequest of one profiled configuration -> JSON, which
the process run under ncu (`nnperf step --request FILE`) reads."""

from nnperf.core.contract import ProfileStepRequest, from_dict, write_request
from nnperf.core.jobs import logged_job

with logged_job(snakemake.log[0], "profile_request"):  # noqa: F821 - injected by Snakemake
    request = from_dict(ProfileStepRequest, snakemake.params.request)  # noqa: F821
    write_request(snakemake.output.request, request)  # noqa: F821
