"""CHE (Table 6): one `dape che` job per cell (task × method × learning rate) and seed (results/che/{cell}/)."""


rule che:
    output:
        che="results/che/{cell}/seed{seed}.csv",
    params:
        spec=che_spec,  # `dape che --spec JSON`
        # the fingerprint: the spec's settings in groups, which Snakemake's params trigger compares
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
        "dape che --spec {params.spec} --threads {threads} --out {output.che} > {log} 2>&1"
