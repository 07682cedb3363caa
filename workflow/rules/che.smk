"""CHE (Table 6): one `dape che` job per cell (task × method × learning rate) and seed (results/che/{cell}/)."""


rule che:
    output:
        che="results/che/{cell}/seed{seed}.csv",
    params:
        attention=che_options("attention"),
        che=che_options("che"),
    threads: threads_of("che")
    resources:
        **job_resources("che"),
    log:
        "logs/che/{cell}/seed{seed}.log",
    benchmark:
        "logs/che/{cell}/seed{seed}.benchmark.tsv"
    conda:
        "../../envs/lm.yaml"
    shell:
        "dape che {params.attention} {params.che} --seed {wildcards.seed} --threads {threads} --out {output.che} > {log} 2>&1"
