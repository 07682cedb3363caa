"""Forward and training-step times with peak memory (Table 7 App. H, §4.2). A timing job times the runs that differ
only in their attention settings and shape — every method of every size —, together at each length in blocks of
fresh worker processes (one per method and size, warm-up discarded, the order rotated each round), on the job's GPU
when it has one (resources.time_lm.gpu), in the runs' `precision`. The DAG repeats each timing job as `replicates`
separate jobs (rule time_lm: results/timing/{timing_job}/rep{k}.csv, one row per method × length, and
rep{k}.repeats.csv, one row per method × length × block × round), so that what changes between jobs shows between
replicates, and merges them (rule merge_timing: results/timing/{timing_job}.csv, the median over every replicate's
repeats, and {timing_job}.repeats.csv, every repeat with its `replicate`). A changed setting of one method reruns its
job's replicates: its methods are timed together; a changed `replicates` reruns the merge and makes the missing
replicates only."""


rule time_lm:
    output:
        timing="results/timing/{timing_job}/rep{replicate}.csv",
        repeats="results/timing/{timing_job}/rep{replicate}.repeats.csv",
    params:
        spec=timing_spec,  # `dape time --spec JSON`: the timing settings, the methods and the replicate
        # the fingerprint: the spec's settings in groups, which Snakemake's params trigger compares
        timing=timing_options("timing"),
        methods=timing_options("methods"),
    threads: threads_of("time_lm")
    resources:
        **job_resources("time_lm"),
    log:
        "logs/timing/{timing_job}/rep{replicate}.log",
    benchmark:
        "logs/timing/{timing_job}/rep{replicate}.benchmark.tsv"
    conda:
        "../../envs/lm.yaml"
    shell:
        "dape time --spec {params.spec} --threads {threads} --out {output.timing}"
        " --repeats-out {output.repeats} > {log} 2>&1"


rule merge_timing:
    input:
        timings=timing_replicates(),
        repeats=timing_replicates("repeats.csv"),
    output:
        timing="results/timing/{timing_job}.csv",
        repeats="results/timing/{timing_job}.repeats.csv",
    params:
        spec=timing_spec,  # the timing settings, the methods and `replicates`
        timing=timing_options("timing"),
        methods=timing_options("methods"),
        replicates=timing_options("replicates"),
    localrule: True
    log:
        "logs/timing/{timing_job}.merge.log",
    conda:
        "../../envs/lm.yaml"
    shell:
        "dape time --spec {params.spec} --merge {input.timings} --out {output.timing}"
        " --repeats-out {output.repeats} > {log} 2>&1"
