"""Language models: train each (run, seed) once, evaluate it at every length its families ask for, and draw the
attention sink and appendix-K maps for the runs of families with attention_maps (results/lm/{run}/seed{seed}/).
evaluate_lm also evaluates the Hugging Face decoders of finetune.smk (their model/ directory)."""


rule train_lm:
    input:
        unpack(train_inputs),
    output:
        model="results/lm/{run}/seed{seed}/model.pt",
        summary="results/lm/{run}/seed{seed}/summary.json",
        metrics="results/lm/{run}/seed{seed}/metrics.jsonl",
    params:
        spec=train_spec,  # every setting of the job: `dape train --spec JSON`
        # the fingerprint: the spec's settings in groups, which Snakemake's params trigger compares
        attention=lm_options("attention"),
        shape=lm_options("shape"),
        training=lm_options("training"),
        data_dir=input_folder("meta"),
        out_dir=output_folder("model"),
        # outside the outputs, so that a failed job's clean-up keeps them and a rerun resumes
        checkpoint_dir="results/checkpoints/{run}/seed{seed}",
        # `dape train`, or torchrun with one process per GPU of the run's size (resources.train_lm.sizes)
        launcher=train_launcher,
    wildcard_constraints:
        run=segment_other_than(PLAN.finetune_runs),  # fine-tune runs: finetune_lm (finetune.smk)
    priority: 10  # the longest jobs first, so that short ones fill the end of the schedule
    threads: train_threads
    resources:
        **train_job_resources(),
    log:
        "logs/lm/{run}/seed{seed}/train.log",
    benchmark:
        "logs/lm/{run}/seed{seed}/train.benchmark.tsv"
    conda:
        "../../envs/lm.yaml"
    shell:
        "{params.launcher} --spec {params.spec} --data-dir {params.data_dir} --out-dir {params.out_dir}"
        " --checkpoint-dir {params.checkpoint_dir} --mem-mb {resources.mem_mb} --no-progress > {log} 2>&1"


rule evaluate_lm:
    input:
        unpack(eval_inputs),
    output:
        eval="results/lm/{run}/seed{seed}/eval.csv",
        windows="results/lm/{run}/seed{seed}/windows.csv",
    params:
        spec=eval_spec,  # `dape evaluate --spec JSON`
        evaluation=eval_options,  # the fingerprint
        data_dir=input_folder("meta"),
    threads: threads_of("evaluate_lm")
    resources:
        **job_resources("evaluate_lm"),
    log:
        "logs/lm/{run}/seed{seed}/evaluate.log",
    benchmark:
        "logs/lm/{run}/seed{seed}/evaluate.benchmark.tsv"
    conda:
        model_environment  # envs/hf.yaml for a finetune family's Hugging Face decoder
    shell:
        "dape evaluate --spec {params.spec} --checkpoint {input.model} --data-dir {params.data_dir}"
        " --threads {threads} --out {output.eval} --windows-out {output.windows} > {log} 2>&1"


rule attention_maps:
    input:
        unpack(eval_inputs),
    output:
        eval="results/lm/{run}/seed{seed}/attention/L{length}/eval.csv",
        sink="results/lm/{run}/seed{seed}/attention/L{length}/sink.csv",
        maps="results/lm/{run}/seed{seed}/attention/L{length}/maps.npz",
    params:
        spec=attention_map_spec,  # `dape evaluate --spec JSON`
        evaluation=attention_map_options,  # the fingerprint
        data_dir=input_folder("meta"),
    threads: threads_of("attention_maps")
    resources:
        **job_resources("attention_maps"),
    log:
        "logs/lm/{run}/seed{seed}/attention-L{length}.log",
    benchmark:
        "logs/lm/{run}/seed{seed}/attention-L{length}.benchmark.tsv"
    conda:
        "../../envs/lm.yaml"
    shell:
        "dape evaluate --spec {params.spec} --checkpoint {input.model} --data-dir {params.data_dir}"
        " --threads {threads} --out {output.eval} --sink-out {output.sink} --heatmap-out {output.maps}"
        " > {log} 2>&1"
