"""Rule operator_profile: one configuration's training steps under torch.profiler -> its
document, trace, operators/layers/steps/memory tables (nnperf.torchprof.profile)."""

from pathlib import Path

from nnperf.core.contract import OperatorProfileRequest, from_dict
from nnperf.core.jobs import logged_job
from nnperf.torchprof.profile import operator_profile_to_files

with logged_job(snakemake.log[0], "operator_profile"):  # noqa: F821 - injected by Snakemake
    output = snakemake.output  # noqa: F821
    operator_profile_to_files(
        from_dict(OperatorProfileRequest, snakemake.params.request),  # noqa: F821
        out_json=output.document,
        out_trace=output.trace,
        out_operators=output.operators,
        out_layers=output.layers,
        out_steps=output.steps,
        out_memory=output.memory,
        run_json=snakemake.input.run,  # noqa: F821
        complexity_json=snakemake.input.complexity,  # noqa: F821
        # The checkout whose git commit the profile records: this script's repository.
        workflow_dir=Path(snakemake.scriptdir).parents[1],  # noqa: F821
    )
