# Before Snakemake reads the Snakefile's `configfile:` (config/config.yaml): a missing or
# unparsable file is one line naming it, with the line and column where YAML stopped
# (nnperf.study.loading.default_config_problem). Snakemake's own messages name no line.
# Files given with --configfile are read by Snakemake's command line before any workflow
# code runs, so they cannot be checked here (`nnperf plan --configfile FILE` checks them).

import sys
from pathlib import Path

# This checkout's library (as in common.smk).
sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from nnperf.study.loading import default_config_problem

DEFAULT_CONFIG_PROBLEM = default_config_problem(workflow.overwrite_configfiles)
if DEFAULT_CONFIG_PROBLEM:
    sys.exit(f"nnperf: {DEFAULT_CONFIG_PROBLEM}")
