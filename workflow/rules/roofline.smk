rule roofline_points:
    input:
        unpack(roofline_points_inputs),
    output:
        points=report(
            "results/tables/roofline_points.csv",
            caption="../report/roofline_points.rst",
            category="Roofline",
            labels={"table": "roofline points"},
        ),
        flops=report(
            "results/tables/flops_comparison.csv",
            caption="../report/flops_comparison.rst",
            category="Roofline",
            labels={"table": "measured vs analytic FLOPs"},
        ),
    log:
        "logs/tables/roofline_points.log",
    conda:
        "../../envs/nnperf.yaml"
    params:
        nnperf=NNPERF,
        flags=roofline_points_flags,
    shell:
        "{params.nnperf} roofline-points {params.flags} --output {output.points}"
        " --flops-table {output.flops} > {log} 2>&1"


rule plot_roofline:
    input:
        unpack(plot_roofline_inputs),
    output:
        figure=report(
            "results/figures/roofline/{device}/{model}/{precision}/bs{batch_size}/{variant}.png",
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
        "logs/figures/roofline/{device}/{model}/{precision}/bs{batch_size}/{variant}.log",
    conda:
        "../../envs/nnperf.yaml"
    params:
        nnperf=NNPERF,
        flags=plot_roofline_flags,
    shell:
        "{params.nnperf} plot-roofline --kind config --points {input.points} {params.flags}"
        " --device {wildcards.device} --model {wildcards.model}"
        " --precision {wildcards.precision} --batch-size {wildcards.batch_size}"
        " --variant {wildcards.variant} --output {output.figure} > {log} 2>&1"


rule plot_roofline_steps:
    input:
        unpack(plot_roofline_inputs),
    output:
        figure=report(
            "results/figures/roofline_steps/{device}.png",
            caption="../report/roofline_steps.rst",
            category="Roofline",
            subcategory="{device}",
            labels={"figure": "step roofline, all configurations"},
        ),
    log:
        "logs/figures/roofline_steps/{device}.log",
    conda:
        "../../envs/nnperf.yaml"
    params:
        nnperf=NNPERF,
        flags=plot_roofline_flags,
    shell:
        "{params.nnperf} plot-roofline --kind device --points {input.points} {params.flags}"
        " --device {wildcards.device} --output {output.figure} > {log} 2>&1"
