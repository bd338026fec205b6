"""Rule timed_run: one configuration's run JSON, per-window and per-step CSVs, out of the
folder of the group that measured it (nnperf.engine.runner.copy_member)."""

from nnperf.core.contract import RunRequest, from_dict
from nnperf.core.jobs import logged_job
from nnperf.engine.runner import copy_member

with logged_job(snakemake.log[0], "timed_run"):  # noqa: F821 - injected by Snakemake
    copy_member(
        snakemake.input.group,  # noqa: F821
        from_dict(RunRequest, snakemake.params.request),  # noqa: F821
        {
            "run": snakemake.output.run,  # noqa: F821
            "run_windows": snakemake.output.windows,  # noqa: F821
            "run_steps": snakemake.output.steps,  # noqa: F821
        },
    )
