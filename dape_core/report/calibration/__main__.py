"""``python -m dape_core.report.calibration``: the verdict rules' calibration, written to
``benchmarks/results/verdict_calibration.csv`` by :func:`~dape_core.report.calibration.main` (``--help``: options)."""

import sys

from dape_core.report.calibration import main

if __name__ == "__main__":
    sys.exit(main())
