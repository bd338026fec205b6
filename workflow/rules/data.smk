# Compute nodes of a cluster often have no internet: the download runs where Snakemake runs.
localrules:
    prepare_dataset,


rule prepare_dataset:
    output:
        directory("resources/data/{dataset}"),
    log:
        "logs/data/{dataset}.log",
    conda:
        "../../envs/nnperf.yaml"
    params:
        nnperf=NNPERF,
        flags=dataset_flags(),
    shell:
        "{params.nnperf} prepare-dataset --dataset {wildcards.dataset} --out {output}"
        " {params.flags} > {log} 2>&1"
