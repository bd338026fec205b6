# One job per configuration: a few training steps under torch.profiler, after its timed run
# (whose step time sizes the profile), never beside a measurement (bench_slot, and every
# core on the CPU). Then the figures of each profile.


rule operator_profile:
    input:
        data=run_data,
        model_code=model_code,
        run=layout.TEMPLATES["run"],
        complexity=layout.TEMPLATES["complexity"],
    output:
        document=layout.TEMPLATES["opprofile"],
        trace=layout.TEMPLATES["opprofile_trace"],
        operators=report(
            layout.TEMPLATES["opprofile_operators"],
            caption="../report/operators_table.rst",
            category="Operators",
            subcategory="{model}",
            labels={
                "device": "{device}",
                "precision": "{precision}",
                "batch size": "{batch_size}",
                "variant": "{variant}",
                "table": "operators",
            },
        ),
        layers=report(
            layout.TEMPLATES["opprofile_layers"],
            caption="../report/layers_table.rst",
            category="Operators",
            subcategory="{model}",
            labels={
                "device": "{device}",
                "precision": "{precision}",
                "batch size": "{batch_size}",
                "variant": "{variant}",
                "table": "layers",
            },
        ),
        steps=layout.TEMPLATES["opprofile_steps"],
        memory=layout.TEMPLATES["opprofile_memory"],
    log:
        layout.log("opprofile"),
    priority: MEASURING_PRIORITY
    conda:
        "../../envs/nnperf.yaml"
    threads: measurement_threads
    resources:
        bench_slot=1,
    params:
        request=operator_profile_request,
        code=script_code("operator_profile"),
    script:
        "../scripts/operator_profile.py"


rule plot_operators:
    input:
        document=layout.TEMPLATES["opprofile"],
        table=layout.TEMPLATES["opprofile_operators"],
    output:
        figure=report(
            layout.TEMPLATES["operators_figure"],
            caption="../report/operators.rst",
            category="Operators",
            subcategory="{model}",
            labels={
                "device": "{device}",
                "precision": "{precision}",
                "batch size": "{batch_size}",
                "variant": "{variant}",
                "figure": "top operators",
            },
        ),
    log:
        layout.log("operators_figure"),
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        kind="operators",
        code=script_code("plot_operators"),
    script:
        "../scripts/plot_operators.py"


rule plot_memory:
    input:
        document=layout.TEMPLATES["opprofile"],
        table=layout.TEMPLATES["opprofile_memory"],
    output:
        figure=report(
            layout.TEMPLATES["memory_figure"],
            caption="../report/memory.rst",
            category="Operators",
            subcategory="{model}",
            labels={
                "device": "{device}",
                "precision": "{precision}",
                "batch size": "{batch_size}",
                "variant": "{variant}",
                "figure": "peak memory",
            },
        ),
    log:
        layout.log("memory_figure"),
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        kind="memory",
        code=script_code("plot_operators"),
    script:
        "../scripts/plot_operators.py"
