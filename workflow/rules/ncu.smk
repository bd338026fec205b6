# The step profiled under ncu is a separate process by necessity (ncu wraps it), so it reads
# its request from a JSON file that rule profile_request writes from the config.


rule profile_request:
    output:
        request=layout.TEMPLATES["profile_request"],
    log:
        layout.log("profile_request"),
    priority: MEASURING_PRIORITY
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        request=profile_request,
        code=script_code("profile_request"),
    script:
        "../scripts/profile_request.py"


rule ncu_profile:
    input:
        data=run_data,
        model_code=model_code,
        request=layout.TEMPLATES["profile_request"],
    output:
        report=layout.TEMPLATES["profile_report"],
        meta=layout.TEMPLATES["profile_meta"],
    log:
        layout.log("profile_meta"),
    priority: MEASURING_PRIORITY
    conda:
        "../../envs/nnperf.yaml"
    resources:
        bench_slot=1,
    params:
        nnperf=NNPERF,
        clock_control=STUDY.ncu.clock_control,
        code=code_hash("nnperf.ncu.profiled_step", "nnperf.ncu.command"),
    shell:
        "{params.nnperf} ncu-command profile --report {output.report} --meta {output.meta}"
        " --clock-control {params.clock_control} --request {input.request} > {log} 2>&1"


rule ncu_export:
    input:
        report=layout.TEMPLATES["profile_report"],
    output:
        csv=layout.TEMPLATES["profile_csv"],
    log:
        layout.log("profile_csv"),
    conda:
        "../../envs/nnperf.yaml"
    params:
        code=script_code("ncu_export"),
    script:
        "../scripts/ncu_export.py"


rule ncu_kernels:
    input:
        unpack(ncu_kernels_inputs),
    output:
        table=report(
            table_pattern("kernels"),
            caption="../report/kernels.rst",
            category="Kernels",
            labels={"table": "kernels"},
        ),
    log:
        layout.log("table", dataset="{dataset}", name="kernels"),
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        code=script_code("ncu_kernels"),
    script:
        "../scripts/ncu_kernels.py"
