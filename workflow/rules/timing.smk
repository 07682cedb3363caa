"""Forward and training-step times with peak memory (Table 7, §4.2): one `dape time` job per timing run, each
length measured in a fresh process, on the job's GPU when it has one (resources.time_lm.gpu), in the run's
`precision` (results/timing/{timing_run}.csv, each row naming its device)."""


rule time_lm:
    output:
        timing="results/timing/{timing_run}.csv",
    params:
        attention=timing_options("attention"),
        timing=timing_options("timing"),
    threads: threads_of("time_lm")
    resources:
        **job_resources("time_lm"),
    log:
        "logs/timing/{timing_run}.log",
    benchmark:
        "logs/timing/{timing_run}.benchmark.tsv"
    conda:
        "../../envs/lm.yaml"
    shell:
        "dape time {params.attention} {params.timing} --threads {threads} --out {output.timing} > {log} 2>&1"
