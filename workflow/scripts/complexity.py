"""Rule complexity: one model's FLOPs, saved activations and traffic -> JSON + per-layer CSV."""

from nnperf.core.contract import ComplexityRequest, from_dict
from nnperf.core.jobs import logged_job
from nnperf.workload import complexity

with logged_job(snakemake.log[0], "complexity"):  # noqa: F821 - injected by Snakemake
    request = from_dict(ComplexityRequest, snakemake.params.request)  # noqa: F821
    document = complexity.write_complexity(
        request, snakemake.output.summary, snakemake.output.layers  # noqa: F821
    )
    print(complexity.summary(document))
