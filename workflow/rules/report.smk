rule environment_table:
    input:
        runs=run_outputs(),
    output:
        report(
            "results/tables/environment.csv",
            caption="../report/environment.rst",
            category="Environment",
            labels={"table": "environment of every run"},
        ),
    log:
        "logs/tables/environment.log",
    conda:
        "../../envs/nnperf.yaml"
    params:
        nnperf=NNPERF,
    shell:
        "{params.nnperf} environment-table --runs {input.runs} --out {output} > {log} 2>&1"


rule compare_machines:
    input:
        summary="results/tables/summary.csv",
        runs="results/tables/runs.csv",
        environment="results/tables/environment.csv",
        extra_results=config["report"]["extra_results"],
    output:
        table=report(
            "results/tables/machines_summary.csv",
            caption="../report/machines.rst",
            category="Throughput",
            subcategory="Machines",
            labels={"table": "summary of every machine"},
        ),
        figure=report(
            "results/figures/machines/throughput.png",
            caption="../report/machines.rst",
            category="Throughput",
            subcategory="Machines",
            labels={"figure": "throughput per machine"},
        ),
    log:
        "logs/figures/machines/throughput.log",
    conda:
        "../../envs/nnperf.yaml"
    params:
        nnperf=NNPERF,
        flags=compare_machines_flags,
    shell:
        "{params.nnperf} compare-machines {params.flags}"
        " --out-csv {output.table} --out-figure {output.figure} > {log} 2>&1"


rule render_report:
    input:
        unpack(report_inputs),
    output:
        html=report(
            "reports/summary.html",
            caption="../report/summary.rst",
            category="Report",
            labels={"document": "summary", "format": "HTML"},
        ),
        md=report(
            "reports/summary.md",
            caption="../report/summary.rst",
            category="Report",
            labels={"document": "summary", "format": "Markdown"},
        ),
    log:
        "logs/reports/summary.log",
    conda:
        "../../envs/nnperf.yaml"
    params:
        nnperf=NNPERF,
        flags=render_report_flags,
    shell:
        "{params.nnperf} render-report {params.flags}"
        " --out-html {output.html} --out-md {output.md} > {log} 2>&1"
