"""Rule prepare_dataset: download and verify CIFAR, generate the synthetic set, or decode and
hash the user's ImageFolder into its manifest (nnperf.workload.datasets)."""

from nnperf.core.contract import DatasetRequest, from_dict
from nnperf.core.jobs import logged_job
from nnperf.workload import datasets as data

with logged_job(snakemake.log[0], "prepare_dataset"):  # noqa: F821 - injected by Snakemake
    request = from_dict(DatasetRequest, snakemake.params.request)  # noqa: F821
    print(data.summary(data.prepare(request)))
