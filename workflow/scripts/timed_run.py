"""Rule timed_run: one configuration -> run JSON, per-window and per-step CSVs
(nnperf.engine.runner).

The body runs only as the main module: without the warm server (NNPERF_WARM_SERVER=0, or
any non-Linux machine) the workers are forkserver/spawn children, which import this file
again as `__mp_main__`, where Snakemake's `snakemake` object does not exist.

Either way the workers' stdout and stderr reach this job's `log:`: the job relays them into
its `sys.stderr`, which `logged_job` points at the log (`nnperf.engine.workerlog`).
"""

from pathlib import Path

from nnperf.core.contract import RunRequest, from_dict
from nnperf.core.jobs import logged_job
from nnperf.engine.runner import run_to_files

if __name__ == "__main__":
    with logged_job(snakemake.log[0], "timed_run"):  # noqa: F821 - injected by Snakemake
        run_to_files(
            from_dict(RunRequest, snakemake.params.request),  # noqa: F821
            snakemake.output.run,  # noqa: F821
            snakemake.output.windows,  # noqa: F821
            snakemake.output.steps,  # noqa: F821
            # The checkout whose git commit the run records: this script's repository.
            workflow_dir=Path(snakemake.scriptdir).parents[1],  # noqa: F821
        )
