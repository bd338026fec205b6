"""Rule timed_group: the configurations of one model x device (every batch size), measured by
interleaved worker processes -> each one's run JSON and CSVs and the group's comparisons, in
the group's folder (nnperf.engine.runner.group_to_files).

The body runs only as the main module: without the warm server (NNPERF_WARM_SERVER=0, or
any non-Linux machine) the workers are forkserver/spawn children, which import this file
again as `__mp_main__`, where Snakemake's `snakemake` object does not exist.

Either way the workers' stdout and stderr reach this job's `log:`: the job relays them into
its `sys.stderr`, which `logged_job` points at the log (`nnperf.engine.workerlog`).
"""

from pathlib import Path

from nnperf.core.contract import RunRequest, from_dict
from nnperf.core.jobs import logged_job
from nnperf.engine.runner import group_to_files

if __name__ == "__main__":
    with logged_job(snakemake.log[0], "timed_group"):  # noqa: F821 - injected by Snakemake
        group_to_files(
            [from_dict(RunRequest, member) for member in snakemake.params.members],  # noqa: F821
            snakemake.output.folder,  # noqa: F821
            # The checkout whose git commit the runs record: this script's repository.
            workflow_dir=Path(snakemake.scriptdir).parents[1],  # noqa: F821
        )
