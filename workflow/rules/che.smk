"""CHE (Table 6): one `dape che` job per cell (task × method × learning rate) and seed (results/che/{cell}/)."""


rule che:
    output:
        che="results/che/{cell}/seed{seed}.csv",
    params:
        options=che_options,
    threads: threads_of("che")
    resources:
        mem_mb=mem_of("che"),
        runtime=runtime_of("che"),
        gpu=gpu_of("che"),
    log:
        "logs/che/{cell}/seed{seed}.log",
    benchmark:
        "logs/che/{cell}/seed{seed}.benchmark.tsv"
    conda:
        "../../envs/lm.yaml"
    shell:
        "dape che {params.options} --seed {wildcards.seed} --threads {threads} --out {output.che} > {log} 2>&1"
