"""The paper's published numbers as tidy CSV files (one row per table cell or quoted number).

Read them with :func:`dape_core.report.paper.load_paper_numbers`; ``errata.md`` lists where the paper
contradicts itself and which value the data uses.
"""
