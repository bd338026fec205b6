rule complexity:
    input:
        model_code=model_code,
    output:
        summary=layout.TEMPLATES["complexity"],
        layers=report(
            layout.TEMPLATES["complexity_layers"],
            caption="../report/complexity.rst",
            category="Complexity",
            subcategory="{model}",
            labels={"model": "{model}", "table": "per-layer"},
        ),
    log:
        layout.log("complexity"),
    priority: MEASURING_PRIORITY
    conda:
        "../../envs/nnperf.yaml"
    params:
        request=complexity_request,
        code=script_code("complexity"),
    script:
        "../scripts/complexity.py"
