# `update`: a failed job (a corrupt run JSON) puts the previous table back (see aggregate_runs).
rule environment_table:
    input:
        runs=study_runs,
    output:
        table=update(
            report(
                table_pattern("environment"),
                caption="../report/environment.rst",
                category="Environment",
                labels={"table": "environment of every run"},
            )
        ),
    log:
        layout.log("table", dataset="{dataset}", name="environment"),
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        code=script_code("environment_table"),
    script:
        "../scripts/environment_table.py"


# Every ratio the report states, machines against machines included, so it reads the other
# machines' folders too (report.extra_results).
rule comparisons_table:
    input:
        unpack(comparisons_inputs),
    output:
        table=report(
            table_pattern("comparisons"),
            caption="../report/comparisons_table.rst",
            category="Throughput",
            subcategory="Tables",
            labels={"table": "comparisons (one row per stated ratio)"},
        ),
    log:
        layout.log("table", dataset="{dataset}", name="comparisons"),
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        request=report_request(),
        code=script_code("comparisons_table"),
    script:
        "../scripts/comparisons_table.py"


rule compare_machines:
    input:
        unpack(compare_machines_inputs),
    output:
        table=report(
            table_pattern("machines_summary"),
            caption="../report/machines.rst",
            category="Throughput",
            subcategory="Machines",
            labels={"table": "summary of every machine"},
        ),
        figure=report(
            layout.TEMPLATES["machines_figure"],
            caption="../report/machines.rst",
            category="Throughput",
            subcategory="Machines",
            labels={"figure": "throughput per machine"},
        ),
    log:
        layout.log("machines_figure"),
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        request=report_request(),
        code=script_code("compare_machines"),
    script:
        "../scripts/compare_machines.py"


rule render_report:
    input:
        unpack(report_inputs),
    output:
        html=report(
            layout.TEMPLATES["summary_html"],
            caption="../report/summary.rst",
            category="Report",
            labels={"document": "summary", "format": "HTML"},
        ),
        md=report(
            layout.TEMPLATES["summary_md"],
            caption="../report/summary.rst",
            category="Report",
            labels={"document": "summary", "format": "Markdown"},
        ),
    log:
        layout.log("summary_html"),
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        request=report_request(),
        code=script_code("render_report"),
    script:
        "../scripts/render_report.py"
