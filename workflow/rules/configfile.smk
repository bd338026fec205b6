# Where nnperf's own files are, and, before Snakemake reads the Snakefile's `configfile:`
# (config/config.yaml), that file's problems in one line naming it, with the line and column
# where YAML stopped (nnperf.study.loading.default_config_problem). Snakemake's own messages
# name no line. Files given with --configfile are read by Snakemake's command line before any
# workflow code runs, so they cannot be checked here (`nnperf plan --configfile FILE` checks
# them).

import sys
from pathlib import Path

from snakemake.sourcecache import LocalSourceFile

# nnperf's checkout, found from this file (workflow/rules/): its library, schema, datasheet
# peaks and default study. Not workflow.basedir: that is the main Snakefile's folder, the
# user's own project when nnperf is used as a module (`module nnperf: snakefile: ...`).
if not isinstance(workflow.current_basedir, LocalSourceFile):
    # github(...) and other hosted sources: Snakemake fetches files one by one, so the
    # library (src/) that every rule imports is not on this disk.
    sys.exit(
        f"nnperf: the module's snakefile must be a path to an nnperf checkout, not "
        f"{workflow.current_basedir}; clone nnperf at that tag and name its Snakefile by path "
        "(docs/own-project.md)"
    )
NNPERF_HOME = Path(str(workflow.current_basedir)).parents[1]
# Used as a module with `config:` (the snakedeploy convention), Snakemake skips the
# Snakefile's `configfile:`: the user's study arrives through `config:` (common.smk).
CONFIG_FROM_MODULE = workflow.modifier.skip_configfile

# This checkout's library (as in common.smk).
sys.path.insert(0, str(NNPERF_HOME / "src"))

from nnperf.study.loading import default_config_problem

if not CONFIG_FROM_MODULE:
    DEFAULT_CONFIG_PROBLEM = default_config_problem(workflow.overwrite_configfiles)
    if DEFAULT_CONFIG_PROBLEM:
        sys.exit(f"nnperf: {DEFAULT_CONFIG_PROBLEM}")
