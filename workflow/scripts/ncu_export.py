"""Rule ncu_export: an Nsight Compute report -> its raw-page CSV, once that parses
(nnperf.ncu.command)."""

from nnperf.core.jobs import logged_job
from nnperf.ncu.command import export_to_csv

with logged_job(snakemake.log[0], "ncu_export"):  # noqa: F821 - injected by Snakemake
    argv = export_to_csv(snakemake.input.report, snakemake.output.csv)  # noqa: F821
    print(" ".join(argv))
