"""Rule ceilings: measure one device's compute and memory roofs -> ceilings JSON."""

from nnperf.core.contract import CeilingsRequest, from_dict
from nnperf.core.jobs import logged_job
from nnperf.roofline import ceilings

with logged_job(snakemake.log[0], "ceilings"):  # noqa: F821 - injected by Snakemake
    request = from_dict(CeilingsRequest, snakemake.params.request)  # noqa: F821
    print(ceilings.summary(ceilings.write_ceilings(request, snakemake.output.json)))  # noqa: F821
