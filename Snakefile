from snakemake.utils import min_version

min_version("8.10")


include: "workflow/rules/configfile.smk"


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/complexity.smk"
include: "workflow/rules/ceilings.smk"
include: "workflow/rules/timing.smk"
include: "workflow/rules/ncu.smk"
include: "workflow/rules/torchprof.smk"
include: "workflow/rules/training.smk"
include: "workflow/rules/roofline.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        get_final_output(),


onstart:
    stop_if_a_device_is_absent()


onerror:
    print_failure_causes()
