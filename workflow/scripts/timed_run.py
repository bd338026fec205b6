"""Rule timed_run: one configuration -> run JSON, per-window and per-step CSVs (nnperf.runner)."""

from pathlib import Path

from nnperf.contract import RunRequest, from_dict
from nnperf.jobs import logged_job
from nnperf.runner import run_to_files

with logged_job(snakemake.log[0], "timed_run"):  # noqa: F821 - injected by Snakemake
    run_to_files(
        from_dict(RunRequest, snakemake.params.request),  # noqa: F821
        snakemake.output.run,  # noqa: F821
        snakemake.output.windows,  # noqa: F821
        snakemake.output.steps,  # noqa: F821
        # The checkout whose git commit the run records: this script's repository.
        workflow_dir=Path(snakemake.scriptdir).parents[1],  # noqa: F821
    )
