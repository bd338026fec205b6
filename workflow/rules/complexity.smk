rule complexity:
    output:
        summary="results/complexity/{model}.json",
        layers=report(
            "results/complexity/{model}_layers.csv",
            caption="../report/complexity.rst",
            category="Complexity",
            subcategory="{model}",
            labels={"model": "{model}", "table": "per-layer"},
        ),
    log:
        "logs/complexity/{model}.log",
    conda:
        "../../envs/nnperf.yaml"
    params:
        nnperf=NNPERF,
        dataset=DATASET,
        optimizer=config["training"]["optimizer"],
    shell:
        "{params.nnperf} complexity --model {wildcards.model} --dataset {params.dataset}"
        " --optimizer {params.optimizer}"
        " --out-json {output.summary} --out-csv {output.layers} > {log} 2>&1"
