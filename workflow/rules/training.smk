# Training to accuracy: each selected configuration under each recipe, after its timed run
# (whose step time bounds the first epoch), never beside a measurement (bench_slot, and
# every core on the CPU). A killed job runs again and resumes from its checkpoints, which
# sit beside its outputs (not outputs themselves: Snakemake would delete them). A recipe's
# pretrained weights are downloaded first, once, into torch hub's cache, where Snakemake runs
# (compute nodes are often offline), as the dataset is.


localrules:
    download_weights,


rule download_weights:
    output:
        weights=weights_pattern(),
    log:
        "logs/weights/{weights_file}.log",
    wildcard_constraints:
        weights_file=r"[\w.-]+\.pth",
    priority: MEASURING_PRIORITY
    conda:
        "../../envs/nnperf.yaml"
    params:
        url=weights_url,
        code=script_code("download_weights"),
    script:
        "../scripts/download_weights.py"


rule train_to_accuracy:
    input:
        data=run_data,
        model_code=model_code,
        run=layout.TEMPLATES["run"],
        weights=pretrained_weights_input,
    output:
        summary=layout.TEMPLATES["training_run"],
        epochs=report(
            layout.TEMPLATES["training_epochs"],
            caption="../report/training_epochs.rst",
            category="Time to accuracy",
            subcategory="{model}",
            labels={
                "device": "{device}",
                "precision": "{precision}",
                "batch size": "{batch_size}",
                "variant": "{variant}",
                "recipe": "{recipe}",
            },
        ),
    log:
        layout.log("training_run"),
    priority: MEASURING_PRIORITY
    conda:
        "../../envs/nnperf.yaml"
    threads: measurement_threads
    resources:
        bench_slot=1,
    params:
        request=training_request,
        checkpoints=training_checkpoints,
        code=script_code("train_to_accuracy"),
    script:
        "../scripts/train_to_accuracy.py"


rule training_table:
    input:
        unpack(training_table_inputs),
    output:
        table=report(
            table_pattern("training"),
            caption="../report/training_table.rst",
            category="Time to accuracy",
            labels={"table": "training runs"},
        ),
    log:
        layout.log("table", dataset="{dataset}", name="training"),
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        code=script_code("training_table"),
    script:
        "../scripts/training_table.py"


rule plot_accuracy:
    input:
        epochs=accuracy_figure_inputs,
    output:
        figure=report(
            layout.TEMPLATES["accuracy_figure"],
            caption="../report/accuracy.rst",
            category="Time to accuracy",
            subcategory="{model}",
            labels={"device": "{device}", "figure": "test accuracy"},
        ),
    log:
        layout.log("accuracy_figure"),
    conda:
        "../../envs/nnperf-report.yaml"
    params:
        target=accuracy_target,
        code=script_code("plot_accuracy"),
    script:
        "../scripts/plot_accuracy.py"
