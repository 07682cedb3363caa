#!/usr/bin/env bash
# Runs once after Snakemake creates this conda environment: installs the checkout's dape_core into it, without
# dependencies (the environment file pins them). DAPE_CORE_SRC is set by workflow/rules/common.smk.
set -euo pipefail
python -m pip install --no-deps --no-build-isolation --editable "${DAPE_CORE_SRC:?set by workflow/rules/common.smk}"
