"""Forward and training-step times with peak memory (Table 7 App. H, §4.2): one `dape time` job per timing job —
the runs that differ only in their attention settings, timed together at each length in interleaved repeats (one
worker process per method, warm-up discarded, the order rotated each round) — on the job's GPU when it has one
(resources.time_lm.gpu), in the runs' `precision`. results/timing/{timing_job}.csv has one row per method × length
(with its run name and device), {timing_job}.repeats.csv one row per method × length × repeat. A changed setting of
one method reruns its job: its methods are timed together."""


rule time_lm:
    output:
        timing="results/timing/{timing_job}.csv",
        repeats="results/timing/{timing_job}.repeats.csv",
    params:
        spec=timing_spec,  # `dape time --spec JSON`: the timing settings and the methods
        # the fingerprint: the spec's settings in groups, which Snakemake's params trigger compares
        timing=timing_options("timing"),
        methods=timing_options("methods"),
    threads: threads_of("time_lm")
    resources:
        **job_resources("time_lm"),
    log:
        "logs/timing/{timing_job}.log",
    benchmark:
        "logs/timing/{timing_job}.benchmark.tsv"
    conda:
        "../../envs/lm.yaml"
    shell:
        "dape time --spec {params.spec} --threads {threads} --out {output.timing}"
        " --repeats-out {output.repeats} > {log} 2>&1"
