"""Rule ncu_kernels: every profile's CSV export and meta -> the per-kernel table
(nnperf.ncu.kernels)."""

from nnperf.core.jobs import logged_job
from nnperf.ncu.kernels import write_table

with logged_job(snakemake.log[0], "ncu_kernels"):  # noqa: F821 - injected by Snakemake
    inputs = snakemake.input  # noqa: F821
    # ncu_kernels_inputs (common.smk) lists csvs and metas of the same configurations in the
    # same order.
    write_table(zip(inputs.csvs, inputs.metas), snakemake.output.table)  # noqa: F821
