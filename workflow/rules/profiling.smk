rule ncu_profile:
    input:
        data=DATA_DIR,
    output:
        report=f"{PROFILE}.ncu-rep",
        meta=f"{PROFILE}.ncu.json",
    log:
        "logs/profiles/{device}/{model}/{precision}/bs{batch_size}/{variant}.ncu_profile.log",
    conda:
        "../../envs/nnperf.yaml"
    resources:
        bench_slot=1,
    params:
        nnperf=NNPERF,
        clock_control=config["ncu"]["clock_control"],
        step_flags=ncu_step_flags,
    shell:
        "{params.nnperf} ncu-command profile --report {output.report} --meta {output.meta}"
        " --clock-control {params.clock_control} --nnperf-step -- {params.step_flags}"
        " > {log} 2>&1"


rule ncu_export:
    input:
        report=f"{PROFILE}.ncu-rep",
    output:
        csv=f"{PROFILE}.csv",
    log:
        "logs/profiles/{device}/{model}/{precision}/bs{batch_size}/{variant}.ncu_export.log",
    conda:
        "../../envs/nnperf.yaml"
    params:
        nnperf=NNPERF,
    shell:
        "{params.nnperf} ncu-command export --report {input.report} --csv {output.csv}"
        " > {log} 2>&1"


rule ncu_kernels:
    input:
        csvs=profile_csvs(),
        metas=profile_metas(),
    output:
        table=report(
            "results/tables/kernels.csv",
            caption="../report/kernels.rst",
            category="Kernels",
            labels={"table": "kernels"},
        ),
    log:
        "logs/tables/kernels.log",
    conda:
        "../../envs/nnperf.yaml"
    params:
        nnperf=NNPERF,
    shell:
        "{params.nnperf} ncu-kernels {input.csvs} --output {output.table} > {log} 2>&1"
