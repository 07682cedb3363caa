"""The report stage: per-job outputs → tidy CSVs, paper-style tables, figures, claim verdicts, paper comparison.

``aggregate`` builds ``lm_results.csv`` (one row per run × evaluation length × seed, with the run's settings,
its ``families``, their ``roles`` and provenance), ``timing.csv``, ``che_results.csv``, ``sink.csv`` and
``leakage.csv``; ``tables`` lays them out as the paper's Tables 1–9 (Markdown and LaTeX); ``figures`` draws
Figs. 1–6, the kernel and width sweeps, the CHE heat-map, the timing bars and the appendix-K maps; ``paper``,
``compare`` and ``claims`` hold the paper's numbers, the paper-vs-run comparison and the claim checks (which find
their rows by role); ``cli`` is ``dape report``.
"""
