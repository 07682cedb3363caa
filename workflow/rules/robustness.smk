"""The robustness check (`make robustness`, target reports/robustness.md; not part of `rule all`): the grid rerun
under a shifted configuration derived from this one (config `robustness`: other seeds, another data split,
another training length; dape_core/config/shift.py), then both runs' verdicts side by side.

The shifted grid runs as a nested Snakemake in its own working directory (`robustness.workdir`, default
robustness/): a complete DAG of its own — its results/, reports/, logs and .snakemake metadata, incremental and
resumable like the main one — that cannot overwrite an output of this run, whose files carry the same names. The
outer DAG sees only its claims.
"""

from dape_core.config import shift as robustness_shift

ROBUSTNESS_DIR = PLAN.config["robustness"]["workdir"]  # the validated configuration, defaults filled in


rule robustness_config:
    output:
        config=f"{ROBUSTNESS_DIR}/config.yaml",
        summary=f"{ROBUSTNESS_DIR}/shift.json",
    params:
        digest=grid.spec_digest(robustness_shift.shifted_config(config)),
    log:
        "logs/robustness/config.log",
    localrule: True
    run:
        robustness_shift.write_shifted_config(output.config, config, output.summary)


rule robustness_run:
    input:
        config=f"{ROBUSTNESS_DIR}/config.yaml",
    output:
        claims=f"{ROBUSTNESS_DIR}/reports/claims.csv",
        markdown=f"{ROBUSTNESS_DIR}/reports/claims.md",
    params:
        snakefile=str(Path(workflow.main_snakefile).resolve()),
        directory=str(Path(ROBUSTNESS_DIR).resolve()),
        config=lambda wildcards, input: str(Path(input.config).resolve()),
    threads: local_cores()
    log:
        "logs/robustness/run.log",
    localrule: True
    run:
        # the Python that runs this Snakemake runs the nested one (the same installation, like every job's `dape`);
        # a nested run killed earlier left its lock behind: workflow_lock clears it (and refuses a live one) first,
        # as `make` does for the outer run
        nested = "--snakefile {params.snakefile} --directory {params.directory} --configfile {params.config}"
        shell(f"{sys.executable} -m dape_core.workflow_lock -- {nested} > {{log}} 2>&1")
        # a run of its own, which logs its own estimate
        shell(
            f"env -u {ESTIMATE_LOGGED} {sys.executable} -m snakemake {nested} --cores {{threads}} --rerun-incomplete"
            " --keep-going reports/claims.csv reports/claims.md >> {log} 2>&1"
        )


rule robustness:
    input:
        claims=f"{REPORTS}/claims.csv",
        shifted=f"{ROBUSTNESS_DIR}/reports/claims.csv",
        summary=f"{ROBUSTNESS_DIR}/shift.json",
    output:
        markdown=f"{REPORTS}/robustness.md",
        table=f"{REPORTS}/robustness.csv",
    log:
        "logs/robustness/report.log",
    localrule: True
    conda:
        "../../envs/report.yaml"
    shell:
        "dape report robustness --claims {input.claims} --shifted-claims {input.shifted}"
        " --shift-summary {input.summary} --out-md {output.markdown} --out-csv {output.table} > {log} 2>&1"
