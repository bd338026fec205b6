rule ceilings:
    input:
        peaks="config/peaks.yaml",
    output:
        json=report(
            "results/ceilings/{device}.json",
            caption="../report/ceilings.rst",
            category="Ceilings",
            subcategory="{device}",
            labels={"device": "{device}", "table": "measured and datasheet roofs"},
        ),
    log:
        "logs/ceilings/{device}.log",
    conda:
        "../../envs/nnperf.yaml"
    threads: measurement_threads
    resources:
        bench_slot=1,
    params:
        nnperf=NNPERF,
        flags=ceilings_flags(),
    shell:
        "{params.nnperf} ceilings --device {wildcards.device} --peaks {input.peaks}"
        " --out {output.json} {params.flags} > {log} 2>&1"


rule plot_ceilings:
    input:
        ceilings="results/ceilings/{device}.json",
    output:
        png=report(
            "results/figures/ceilings/{device}_sweep.png",
            caption="../report/ceilings_sweep.rst",
            category="Ceilings",
            subcategory="{device}",
            labels={"device": "{device}", "figure": "working-set sweep"},
        ),
    log:
        "logs/figures/ceilings/{device}_sweep.log",
    conda:
        "../../envs/nnperf.yaml"
    params:
        nnperf=NNPERF,
    shell:
        "{params.nnperf} plot-ceilings --ceilings {input.ceilings} --out {output.png} > {log} 2>&1"
