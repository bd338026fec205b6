"""Rule roofline_points: summary.csv, complexity JSONs and kernels.csv -> every roofline point
and one row per profiled configuration: FLOPs checks, roofs, clocks, GPU busy share
(nnperf.roofline.points, written by nnperf.roofline.tables)."""

from nnperf.core.jobs import logged_job
from nnperf.roofline.tables import write_points

with logged_job(snakemake.log[0], "roofline_points"):  # noqa: F821 - injected by Snakemake
    write_points(
        snakemake.input.summary,  # noqa: F821
        list(snakemake.input.complexity),  # noqa: F821
        snakemake.input.get("kernels"),  # noqa: F821 - absent when nothing was profiled
        snakemake.output.points,  # noqa: F821
        snakemake.output.profiles,  # noqa: F821
    )
