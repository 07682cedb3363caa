"""Leakage ablation (§4.5, Fig. 6): each run trained without tril next to its tril twin, per evaluation length
and seed (reports/leakage.csv). The runs themselves are trained and evaluated by the rules of lm.smk."""


rule leakage_table:
    input:
        plan=final_plan_json,
        evals=lambda wildcards: lm_files("eval.csv", leakage_jobs(final_plan())),
    output:
        leakage=report(
            f"{REPORTS}/leakage.csv",
            caption="../report/leakage_table.rst",
            category="Language models",
            subcategory="leakage",
        ),
    localrule: True
    log:
        "logs/report/leakage_table.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "dape report leakage --plan {input.plan} --evals {input.evals} --out {output.leakage} > {log} 2>&1"
