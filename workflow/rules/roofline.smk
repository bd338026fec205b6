rule roofline_points:
    input:
        unpack(roofline_points_inputs),
    output:
        points=report(
            table_pattern("roofline_points"),
            caption="../report/roofline_points.rst",
            category="Roofline",
            labels={"table": "roofline points"},
        ),
        profiles=report(
            table_pattern("profiles"),
            caption="../report/profiles.rst",
            category="Roofline",
            labels={"table": "profiled configurations"},
        ),
    log:
        layout.log("table", dataset="{dataset}", name="roofline_points"),
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        code=script_code("roofline_points"),
    script:
        "../scripts/roofline_points.py"


rule plot_roofline:
    input:
        unpack(plot_roofline_inputs),
    output:
        figure=report(
            layout.TEMPLATES["roofline_figure"],
            caption="../report/roofline.rst",
            category="Roofline",
            subcategory="{model}",
            labels={
                "device": "{device}",
                "precision": "{precision}",
                "batch size": "{batch_size}",
                "variant": "{variant}",
            },
        ),
    log:
        layout.log("roofline_figure"),
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        kind="roofline",
        figure=figure_keys,
        code=script_code("plot_roofline"),
    script:
        "../scripts/plot_roofline.py"


rule plot_roofline_steps:
    input:
        unpack(plot_roofline_inputs),
    output:
        figure=report(
            layout.TEMPLATES["roofline_steps_figure"],
            caption="../report/roofline_steps.rst",
            category="Roofline",
            subcategory="{device}",
            labels={"figure": "step roofline, all configurations"},
        ),
    log:
        layout.log("roofline_steps_figure"),
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        kind="roofline_steps",
        figure=figure_keys,
        code=script_code("plot_roofline"),
    script:
        "../scripts/plot_roofline.py"
