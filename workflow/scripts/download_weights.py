"""Rule download_weights: a recipe's pretrained weights into torch hub's cache, refused
unless the file's SHA-256 starts with the hash in its name (nnperf.workload.models)."""

from nnperf.core.jobs import logged_job
from nnperf.workload.models import ensure_weights_file, file_sha256

with logged_job(snakemake.log[0], "download_weights"):  # noqa: F821 - injected by Snakemake
    url = snakemake.params.url  # noqa: F821
    path = ensure_weights_file(url, snakemake.output.weights)  # noqa: F821
    print(f"{path}: from {url}, sha256 {file_sha256(path)}")
