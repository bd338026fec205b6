# One job measures a group: every batch size, precision and variant of one model x device,
# by worker processes forked from the job's warm process that alternate between the
# configurations (A B B A ...), so drift and neighbours hit the configurations it compares
# alike; timed windows until each configuration's CI target and each comparison's, or the
# budgets (nnperf.engine.interleave, nnperf.engine.stopping).
rule timed_group:
    input:
        data=group_data,
        model_code=model_code,
    output:
        folder=directory(layout.TEMPLATES["run_group"]),
    log:
        layout.log("run_group"),
    priority: MEASURING_PRIORITY
    conda:
        "../../envs/nnperf.yaml"
    # bench_slot: no other measurement overlaps it; threads: see measurement_threads.
    threads: group_threads
    resources:
        bench_slot=1,
    params:
        members=group_requests,
        code=script_code("timed_group"),
    script:
        "../scripts/timed_group.py"


# Each configuration's own files, out of its group's folder: a copy, run where Snakemake runs.
localrules:
    timed_run,


rule timed_run:
    input:
        group=run_group,
    output:
        run=layout.TEMPLATES["run"],
        windows=layout.TEMPLATES["run_windows"],
        steps=layout.TEMPLATES["run_steps"],
    log:
        layout.log("run"),
    priority: MEASURING_PRIORITY
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        request=run_request,
        code=script_code("timed_run"),
    script:
        "../scripts/timed_run.py"


# The tables are flagged `update`: Snakemake keeps the previous ones while the job runs and
# puts them back when it fails (a corrupt run JSON), so the report still reads a whole set.
rule aggregate_runs:
    input:
        runs=study_runs,
        run_tables=study_run_tables,
    output:
        runs=update(
            report(
                table_pattern("runs"),
                caption="../report/runs_table.rst",
                category="Throughput",
                subcategory="Tables",
                labels={"table": "runs (one row per worker process)"},
            )
        ),
        windows=update(
            report(
                table_pattern("windows"),
                caption="../report/windows_table.rst",
                category="Throughput",
                subcategory="Tables",
                labels={"table": "windows (one row per timed window)"},
            )
        ),
        summary=update(
            report(
                table_pattern("summary"),
                caption="../report/summary_table.rst",
                category="Throughput",
                subcategory="Tables",
                labels={"table": "summary (one row per configuration)"},
            )
        ),
    log:
        layout.log("table", dataset="{dataset}", name="runs"),
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        request=tables_request(),
        code=script_code("aggregate_runs"),
    script:
        "../scripts/aggregate_runs.py"


# One rule per figure kind (each has its own caption), told apart by the kind in the path.


rule plot_throughput:
    input:
        summary=table_pattern("summary"),
        runs=table_pattern("runs"),
    output:
        png=report(
            layout.TEMPLATES["run_figure"],
            caption="../report/throughput.rst",
            category="Throughput",
            subcategory="{model}",
            labels={"device": "{device}", "figure": "throughput vs batch size"},
        ),
    log:
        layout.log("run_figure"),
    wildcard_constraints:
        kind="throughput",
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        figure=figure_keys,
        code=script_code("plot_runs"),
    script:
        "../scripts/plot_runs.py"


rule plot_breakdown:
    input:
        summary=table_pattern("summary"),
    output:
        png=report(
            layout.TEMPLATES["run_figure"],
            caption="../report/breakdown.rst",
            category="Time breakdown",
            subcategory="{model}",
            labels={"device": "{device}", "figure": "phase breakdown"},
        ),
    log:
        layout.log("run_figure"),
    wildcard_constraints:
        kind="breakdown",
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        figure=figure_keys,
        code=script_code("plot_runs"),
    script:
        "../scripts/plot_runs.py"


rule plot_speedup:
    input:
        comparisons=table_pattern("comparisons"),
    output:
        png=report(
            layout.TEMPLATES["run_figure"],
            caption="../report/speedup.rst",
            category="Throughput",
            subcategory="{model}",
            labels={"device": "{device}", "figure": "speedup"},
        ),
    log:
        layout.log("run_figure"),
    wildcard_constraints:
        kind="speedup",
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        figure=figure_keys,
        code=script_code("plot_runs"),
    script:
        "../scripts/plot_runs.py"
