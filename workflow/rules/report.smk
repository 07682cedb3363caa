"""Reports: tidy CSVs with provenance, paper-style tables (Markdown and LaTeX), seaborn figures captioned for
`snakemake --report`, the claim verdicts and the paper-vs-run comparison (reports/)."""


rule write_plan:
    output:
        plan=PLAN_JSON,
    params:
        digest=grid.spec_digest(report_spec()),
    log:
        "logs/report/plan.log",
    localrule: True
    run:
        grid.write_report_spec(output.plan, report_spec(), log[0])


rule aggregate_lm:
    input:
        plan=final_plan_json,
        evals=final_files(lm_files, "eval.csv", None),
        summaries=final_files(lm_files, "summary.json", None),
        windows=final_files(lm_files, "windows.csv", None),
    output:
        lm=report(
            f"{REPORTS}/lm_results.csv",
            caption="../report/lm_results.rst",
            category="Data",
        ),
        windows=f"{REPORTS}/lm_windows.csv",
    localrule: True
    log:
        "logs/report/aggregate_lm.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "dape report lm --plan {input.plan} --evals {input.evals} --summaries {input.summaries}"
        " --out {output.lm} --windows {input.windows} --windows-out {output.windows} > {log} 2>&1"


rule aggregate_sink:
    input:
        plan=final_plan_json,
        sinks=final_files(attention_files, "sink.csv"),
    output:
        sink=f"{REPORTS}/sink.csv",
    localrule: True
    log:
        "logs/report/aggregate_sink.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "dape report sink --plan {input.plan} --sinks {input.sinks} --out {output.sink} > {log} 2>&1"


rule aggregate_timing:
    input:
        plan=PLAN_JSON,
        timings=timing_files(),
        repeats=timing_files("repeats.csv"),
    output:
        timing=report(
            f"{REPORTS}/timing.csv",
            caption="../report/timing_results.rst",
            category="Data",
        ),
        repeats=report(
            f"{REPORTS}/timing_repeats.csv",
            caption="../report/timing_repeats.rst",
            category="Data",
        ),
    localrule: True
    log:
        "logs/report/aggregate_timing.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "dape report timing --plan {input.plan} --timings {input.timings} --out {output.timing}"
        " --repeats {input.repeats} --repeats-out {output.repeats} > {log} 2>&1"


rule aggregate_che:
    input:
        plan=final_plan_json,
        cells=final_files(che_files),
    output:
        che=report(
            f"{REPORTS}/che_results.csv",
            caption="../report/che_results.rst",
            category="Data",
        ),
    localrule: True
    log:
        "logs/report/aggregate_che.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "dape report che --plan {input.plan} --cells {input.cells} --out {output.che} > {log} 2>&1"


rule tables:
    input:
        unpack(report_inputs),
    output:
        table_files(),
    params:
        sources=report_sources,
        out_dir=output_folder(0),
    localrule: True
    log:
        "logs/report/tables.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "dape report tables {params.sources} --out-dir {params.out_dir} > {log} 2>&1"


rule ppl_figure:
    input:
        plan=PLAN_JSON,
        lm=f"{REPORTS}/lm_results.csv",
    output:
        figure=report(
            f"{REPORTS}/figures/ppl_{{family}}.png",
            caption="../report/ppl.rst",
            category="Language models",
            subcategory="{family}",
            labels={"family": "{family}", "figure": "perplexity vs evaluation length"},
        ),
    params:
        title=family_param("title"),
        paper=family_param("paper"),
    wildcard_constraints:
        family=alternatives(lm_families()),
    localrule: True
    log:
        "logs/report/ppl_{family}.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "dape report figure ppl --plan {input.plan} --lm {input.lm} --family {wildcards.family}"
        " --out {output.figure} > {log} 2>&1"


rule sweep_figure:
    input:
        plan=PLAN_JSON,
        lm=f"{REPORTS}/lm_results.csv",
    output:
        figure=report(
            f"{REPORTS}/figures/sweep_{{family}}.png",
            caption="../report/sweep.rst",
            category="Language models",
            subcategory="{family}",
            labels={"family": "{family}", "figure": "perplexity vs the swept setting"},
        ),
    params:
        title=family_param("title"),
        paper=family_param("paper"),
        sweep=family_param("sweep"),
    wildcard_constraints:
        family=alternatives(lm_families()),
    localrule: True
    log:
        "logs/report/sweep_{family}.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "dape report figure sweep --plan {input.plan} --lm {input.lm} --family {wildcards.family}"
        " --out {output.figure} > {log} 2>&1"


rule timing_figure:
    input:
        plan=PLAN_JSON,
        timing=f"{REPORTS}/timing.csv",
    output:
        figure=report(
            f"{REPORTS}/figures/timing_{{family}}.png",
            caption="../report/timing.rst",
            category="Timing",
            subcategory="{family}",
            labels={"family": "{family}", "figure": "time and peak memory"},
        ),
    params:
        title=family_param("title"),
        paper=family_param("paper"),
    wildcard_constraints:
        family=alternatives(PLAN.families_of_stage("timing")),
    localrule: True
    log:
        "logs/report/timing_{family}.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "dape report figure timing --plan {input.plan} --timing {input.timing} --family {wildcards.family}"
        " --out {output.figure} > {log} 2>&1"


rule che_figure:
    input:
        plan=PLAN_JSON,
        che=f"{REPORTS}/che_results.csv",
    output:
        figure=report(
            f"{REPORTS}/figures/che_{{family}}.png",
            caption="../report/che.rst",
            category="CHE",
            subcategory="{family}",
            labels={"family": "{family}", "figure": "accuracy heat-map"},
        ),
    params:
        title=family_param("title"),
        paper=family_param("paper"),
        aggregation=family_param("aggregation"),
    wildcard_constraints:
        family=alternatives(PLAN.families_of_stage("che")),
    localrule: True
    log:
        "logs/report/che_{family}.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "dape report figure che --plan {input.plan} --che {input.che} --family {wildcards.family}"
        " --out {output.figure} > {log} 2>&1"


rule attention_figure:
    input:
        maps="results/lm/{run}/seed{seed}/attention/L{length}/maps.npz",
    output:
        figure=report(
            f"{REPORTS}/figures/attention/{{run}}-seed{{seed}}-L{{length}}.png",
            caption="../report/attention.rst",
            category="Attention maps",
            subcategory="{run}",
            labels={"run": "{run}", "seed": "{seed}", "length": "{length}"},
        ),
    localrule: True
    log:
        "logs/report/attention/{run}-seed{seed}-L{length}.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "dape report figure attention --maps {input.maps} --out {output.figure} > {log} 2>&1"


rule sink_figure:
    input:
        sink=f"{REPORTS}/sink.csv",
    output:
        figure=report(
            f"{REPORTS}/figures/sink.png",
            caption="../report/sink.rst",
            category="Attention maps",
            subcategory="attention sink",
        ),
    localrule: True
    log:
        "logs/report/sink.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "dape report figure sink --sink {input.sink} --out {output.figure} > {log} 2>&1"


rule claims:
    input:
        # the report inputs and, with language models, their per-window losses (the claims' intervals)
        unpack(
            lambda wildcards: report_inputs(wildcards)
            | ({"windows": f"{REPORTS}/lm_windows.csv"} if PLAN.lm_jobs() else {})
            | ({"design": DESIGN_JSON, "protocol": PROTOCOL_JSON} if DESIGN else {})  # the fresh seeds only, read
            # under the protocol sealed before they ran; the looks the configuration's committed history holds
            | ({"ledger": f"{REPORTS}/ledger.csv"} if DESIGN and Path(f"{REPORTS}/ledger.csv").exists() else {})
        ),
    output:
        markdown=report(f"{REPORTS}/claims.md", caption="../report/claims.rst", category="Claims"),
        table=f"{REPORTS}/claims.csv",
    params:
        sources=report_sources,
        gpu_tflops=PLAN.config["estimate"]["gpu_tflops"],
        utilisation=PLAN.config["estimate"]["utilisation"],
    localrule: True
    log:
        "logs/report/claims.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "dape report claims {params.sources} --gpu-tflops {params.gpu_tflops}"
        " --utilisation {params.utilisation}"
        " --out-md {output.markdown} --out-csv {output.table} > {log} 2>&1"


rule paper_comparison:
    input:
        plan=PLAN_JSON,
        lm=f"{REPORTS}/lm_results.csv",
    output:
        markdown=report(f"{REPORTS}/paper_comparison.md", caption="../report/paper_comparison.rst", category="Claims"),
        table=f"{REPORTS}/paper_comparison.csv",
    localrule: True
    log:
        "logs/report/paper_comparison.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "dape report compare --plan {input.plan} --lm {input.lm} --out-md {output.markdown} --out-csv {output.table} > {log} 2>&1"
