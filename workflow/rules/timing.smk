rule timed_run:
    input:
        data=timed_run_data,
    output:
        run=f"{RUN_STEM}.json",
        steps=f"{RUN_STEM}_steps.csv",
    log:
        "logs/runs/{device}/{model}/{precision}/bs{batch_size}/{variant}/rep{rep}.log",
    conda:
        "../../envs/nnperf.yaml"
    # bench_slot: no other measurement overlaps it; threads: see measurement_threads.
    threads: measurement_threads
    resources:
        bench_slot=1,
    params:
        nnperf=NNPERF,
        dataset=DATASET,
        settings=variant_settings_json,
        training=training_flags(),
        workflow_dir=workflow.basedir,
    shell:
        "{params.nnperf} run --model {wildcards.model} --device {wildcards.device}"
        " --precision {wildcards.precision} --batch-size {wildcards.batch_size}"
        " --variant {wildcards.variant} --variant-settings '{params.settings}'"
        " --rep {wildcards.rep} --dataset {params.dataset} --data-root {input.data}"
        " {params.training} --workflow-dir '{params.workflow_dir}'"
        " --out-json {output.run} --out-steps-csv {output.steps} > {log} 2>&1"


rule aggregate_runs:
    input:
        runs=run_outputs(),
    output:
        runs=report(
            "results/tables/runs.csv",
            caption="../report/runs_table.rst",
            category="Throughput",
            subcategory="Tables",
            labels={"table": "runs (one row per rep)"},
        ),
        summary=report(
            "results/tables/summary.csv",
            caption="../report/summary_table.rst",
            category="Throughput",
            subcategory="Tables",
            labels={"table": "summary (one row per configuration)"},
        ),
    log:
        "logs/tables/aggregate_runs.log",
    conda:
        "../../envs/nnperf.yaml"
    params:
        nnperf=NNPERF,
        cv_threshold=config["report"]["cv_threshold"],
    shell:
        "{params.nnperf} aggregate-runs {input.runs} --out-runs {output.runs}"
        " --out-summary {output.summary} --cv-threshold {params.cv_threshold} > {log} 2>&1"


rule plot_throughput:
    input:
        runs="results/tables/runs.csv",
    output:
        png=report(
            "results/figures/throughput/{device}/{model}.png",
            caption="../report/throughput.rst",
            category="Throughput",
            subcategory="{model}",
            labels={"device": "{device}", "figure": "throughput vs batch size"},
        ),
    log:
        "logs/figures/throughput/{device}/{model}.log",
    conda:
        "../../envs/nnperf.yaml"
    params:
        nnperf=NNPERF,
    shell:
        "{params.nnperf} plot-runs --kind throughput --device {wildcards.device}"
        " --model {wildcards.model} --runs {input.runs} --out {output.png} > {log} 2>&1"


rule plot_breakdown:
    input:
        summary="results/tables/summary.csv",
    output:
        png=report(
            "results/figures/breakdown/{device}/{model}.png",
            caption="../report/breakdown.rst",
            category="Time breakdown",
            subcategory="{model}",
            labels={"device": "{device}", "figure": "phase breakdown"},
        ),
    log:
        "logs/figures/breakdown/{device}/{model}.log",
    conda:
        "../../envs/nnperf.yaml"
    params:
        nnperf=NNPERF,
    shell:
        "{params.nnperf} plot-runs --kind breakdown --device {wildcards.device}"
        " --model {wildcards.model} --summary {input.summary} --out {output.png} > {log} 2>&1"


rule plot_speedup:
    input:
        summary="results/tables/summary.csv",
    output:
        png=report(
            "results/figures/speedup/{device}/{model}.png",
            caption="../report/speedup.rst",
            category="Throughput",
            subcategory="{model}",
            labels={"device": "{device}", "figure": "speedup"},
        ),
    log:
        "logs/figures/speedup/{device}/{model}.log",
    conda:
        "../../envs/nnperf.yaml"
    params:
        nnperf=NNPERF,
    shell:
        "{params.nnperf} plot-runs --kind speedup --device {wildcards.device}"
        " --model {wildcards.model} --summary {input.summary} --out {output.png} > {log} 2>&1"
