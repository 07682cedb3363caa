"""The design stage (a configuration's `design` block, dape_core/report/design.py): the families as written are the
pilot; the checkpoint `design` sizes, per claim, the fresh seeds that would decide it at the pilot's effects and
noise, keeps the cheapest that fit design.budget_minutes (reference minutes: priced by the work of their jobs,
dape_core/config/job_cost.py, the same on every machine) and writes
{REPORTS}/design.json; the aggregates then read the pilot's and the fresh seeds' jobs (common.smk final_plan), and
the claims the fresh seeds only. `snakemake -n` shows the pilot and the checkpoint; the fresh jobs appear once it ran."""

if DESIGN:

    checkpoint design:
        input:
            plan=PLAN_JSON,
            evals=lm_files("eval.csv"),
            summaries=lm_files("summary.json"),
            windows=lm_files("windows.csv"),
            sinks=attention_files("sink.csv"),
            cells=che_files(),
        output:
            design=DESIGN_JSON,
            markdown=f"{REPORTS}/design.md",
            protocol=PROTOCOL_JSON,  # sealed in this job, before any fresh seed can run
        params:
            # the fingerprint: a changed budget or seed range redoes the design (and what it reaches)
            settings=DESIGN,
            prices=json.dumps(job_cost.plan_prices(PLAN), sort_keys=True),  # reference CPU-s: a changed price redoes it
            benchmarks=pilot_benchmarks(),  # this machine's seconds: the wall time it prints, never the choice
            threads=" ".join(f"{kind}={threads_of(rule)}" for kind, rule in (("train", "train_lm"),
                             ("evaluate", "evaluate_lm"), ("attention", "attention_maps"), ("che", "che"))),
        localrule: True
        log:
            "logs/report/design.log",
        conda:
            "../../envs/report.yaml"
        shell:
            "dape report design --plan {input.plan} --evals {input.evals} --summaries {input.summaries}"
            " --windows {input.windows} --sinks {input.sinks} --cells {input.cells}"
            " --prices '{params.prices}' --benchmarks {params.benchmarks} --threads {params.threads}"
            " --budget-minutes {params.settings[budget_minutes]} --fresh-seeds-from {params.settings[fresh_seeds_from]}"
            " --max-seeds {params.settings[max_seeds]} --cores {params.settings[cores]}"
            " --out {output.design} --out-md {output.markdown} --out-protocol {output.protocol} --results results"
            " > {log} 2>&1 && cat {output.markdown}"

    rule write_designed_plan:
        input:
            design=DESIGN_JSON,
        output:
            plan=DESIGNED_PLAN_JSON,
        params:
            digest=grid.spec_digest(report_spec()),  # the pilot's plan: a changed family rewrites it
        log:
            "logs/report/plan.designed.log",
        localrule: True
        run:
            grid.write_report_spec(output.plan, final_plan().report_spec(), log[0])
