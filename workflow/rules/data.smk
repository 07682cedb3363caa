"""Corpora → token files: one `dape tokenize` job per dataset of config.yaml (results/data/{dataset}/)."""


rule tokenize:
    input:
        tokenize_inputs,
    output:
        train="results/data/{dataset}/train.bin",
        val="results/data/{dataset}/val.bin",
        train_docs="results/data/{dataset}/train.docs.npy",
        val_docs="results/data/{dataset}/val.docs.npy",
        token_bytes="results/data/{dataset}/token_bytes.npy",
        tokenizer="results/data/{dataset}/tokenizer.json",
        meta="results/data/{dataset}/meta.json",
    params:
        spec=corpus_spec,  # `dape tokenize --spec JSON`
        corpus=corpus_options,  # the fingerprint
        out_dir=output_folder("meta"),
    priority: 20  # every LM job waits for the corpora
    threads: threads_of("tokenize")
    resources:
        **job_resources("tokenize"),
    log:
        "logs/data/{dataset}.log",
    conda:
        "../../envs/data.yaml"
    shell:
        "dape tokenize --spec {params.spec} --out-dir {params.out_dir} > {log} 2>&1"
