"""DAPE V2 reproduction: corpora → language models (train, evaluate, attention maps), timing, CHE → reports/.

`snakemake --cores 2` runs config.yaml; `--configfile configs/smoke.yaml` or `configs/paper.yaml` replaces it.
`snakemake --report reports/report.html` then collects the captioned figures.
"""

from snakemake.utils import min_version

min_version("8.20")

# A configuration given with --configfile is complete (configs/smoke.yaml, configs/paper.yaml): it replaces
# config.yaml instead of being merged into it.
if not workflow.overwrite_configfiles:

    configfile: "config.yaml"

# common.smk's build_plan validates `config` against dape_core/config/config.schema.yaml, fills in its defaults and
# names a wrong field with its allowed values (dape_core.config.schema): once, with libyaml.


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/lm.smk"
include: "workflow/rules/finetune.smk"
include: "workflow/rules/leakage.smk"
include: "workflow/rules/timing.smk"
include: "workflow/rules/che.smk"
include: "workflow/rules/design.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/robustness.smk"


rule all:
    input:
        all_targets(),
    localrule: True


onerror:
    # Snakemake deletes a failed job's outputs but not their seals (<file>.sha256, written by the job itself)
    from dape_core.failed_run import failed_job_errors, remove_orphan_seals

    for seal in remove_orphan_seals("results", REPORTS):
        print(f"dape: removed {seal}: the seal of an output deleted after its job failed", flush=True)
    # each failed job's own one-line error (a damaged input, a refused write …), on the console beside Snakemake's
    # pointer to the job's log
    for line in failed_job_errors(log):
        print(f"dape: {line}", flush=True)

