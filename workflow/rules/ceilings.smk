rule ceilings:
    input:
        peaks=PEAKS,
    output:
        json=report(
            layout.TEMPLATES["ceilings"],
            caption="../report/ceilings.rst",
            category="Ceilings",
            subcategory="{device}",
            labels={"device": "{device}", "table": "measured and datasheet roofs"},
        ),
    log:
        layout.log("ceilings"),
    priority: MEASURING_PRIORITY
    conda:
        "../../envs/nnperf.yaml"
    threads: measurement_threads
    resources:
        bench_slot=1,
    params:
        request=ceilings_request,
        code=script_code("ceilings"),
    script:
        "../scripts/ceilings.py"


rule plot_ceilings:
    input:
        ceilings=layout.TEMPLATES["ceilings"],
    output:
        png=report(
            layout.TEMPLATES["ceilings_figure"],
            caption="../report/ceilings_sweep.rst",
            category="Ceilings",
            subcategory="{device}",
            labels={"device": "{device}", "figure": "working-set sweep"},
        ),
    log:
        layout.log("ceilings_figure"),
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        code=script_code("plot_ceilings"),
    script:
        "../scripts/plot_ceilings.py"
