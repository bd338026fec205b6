"""Rule train_to_accuracy: one configuration trained under one recipe -> its summary JSON and
per-epoch CSV, resuming from its own checkpoints after a kill (nnperf.training.to_accuracy)."""

from pathlib import Path

from nnperf.core.contract import TrainingRunRequest, from_dict
from nnperf.core.jobs import logged_job
from nnperf.training.to_accuracy import RESUME_MATCHING, train_to_files

with logged_job(snakemake.log[0], "train_to_accuracy"):  # noqa: F821 - injected by Snakemake
    params = snakemake.params  # noqa: F821
    train_to_files(
        from_dict(TrainingRunRequest, params.request),
        snakemake.output.summary,  # noqa: F821
        snakemake.output.epochs,  # noqa: F821
        params.checkpoints,
        # Checkpoints of other settings or code are another run's: start over then.
        resume=RESUME_MATCHING,
        engine=params.code,
        run_json=snakemake.input.run,  # noqa: F821
        workflow_dir=Path(snakemake.scriptdir).parents[1],  # noqa: F821
    )
