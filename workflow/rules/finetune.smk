"""Hugging Face decoders: one `dape finetune` job per (run, seed) of the finetune families — the family's base
model (from a fresh configuration or a checkpoint directory) and the runs that fine-tune it with or without a DAPE
processor (results/lm/{run}/seed{seed}/model/, summary.json, metrics.jsonl). evaluate_lm (lm.smk) evaluates their
model/ directories like every other language model, so their rows join reports/lm_results.csv."""


rule finetune_lm:
    input:
        unpack(finetune_inputs),
    output:
        model=directory("results/lm/{run}/seed{seed}/model"),
        summary="results/lm/{run}/seed{seed}/summary.json",
        metrics="results/lm/{run}/seed{seed}/metrics.jsonl",
    params:
        spec=spec_of(finetune_groups, seed=True),  # `dape finetune --spec JSON`
        # the fingerprint: the spec's settings in groups, which Snakemake's params trigger compares
        model=finetune_options("model"),
        training=finetune_options("training"),
        data_dir=input_folder("meta_json"),
        out_dir=output_folder("summary"),
        # outside the outputs, so that a failed job's clean-up keeps them and a rerun resumes
        checkpoint_dir="results/checkpoints/{run}/seed{seed}",
    wildcard_constraints:
        run=alternatives(PLAN.finetune_runs),
    priority: 10
    threads: threads_of("finetune_lm")
    resources:
        **job_resources("finetune_lm"),
    log:
        "logs/lm/{run}/seed{seed}/finetune.log",
    benchmark:
        "logs/lm/{run}/seed{seed}/finetune.benchmark.tsv"
    conda:
        "../../envs/hf.yaml"
    shell:
        "dape finetune --spec {params.spec} --data-dir {params.data_dir} --out-dir {params.out_dir}"
        " --checkpoint-dir {params.checkpoint_dir} --threads {threads} --no-progress > {log} 2>&1"
