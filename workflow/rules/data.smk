# Compute nodes of a cluster often have no internet: the download runs where Snakemake runs.
localrules:
    prepare_dataset,


rule prepare_dataset:
    output:
        directory(layout.TEMPLATES["dataset"]),
    log:
        layout.log("dataset"),
    priority: MEASURING_PRIORITY
    conda:
        "../../envs/nnperf.yaml"
    params:
        request=dataset_request,
        code=script_code("prepare_dataset"),
    script:
        "../scripts/prepare_dataset.py"
