# The two commands of the README (make install brings the hf extra: configs/smoke.yaml and configs/hf.yaml fine-tune
# Hugging Face models):
#   make reproduce   install, then run the whole DAG on config.yaml into reports/ (and reports/report.html);
#                    CONFIG=configs/x.yaml runs x.yaml into reports/x/
#   make test        install with the test extras, then run the test suite (what .ci/run calls)
#   make robustness  the grid rerun under a shifted configuration (other seeds, split seed and training length,
#                    derived from $(CONFIG)'s `robustness` block) into robustness/, then reports/robustness.md
PYTHON ?= python3
VENV ?= .venv
CORES ?= all
CONFIG ?= config.yaml
BIN := $(VENV)/bin
# config.yaml reports into reports/, any other configuration into reports/<its file's stem>/ (as
# dape_core.config.names.reports_dir): the committed reference is never overwritten
CONFIG_NAME = $(basename $(notdir $(CONFIG)))
REPORTS = $(if $(filter config,$(CONFIG_NAME)),reports,reports/$(CONFIG_NAME))
# The CPU build of torch is installed first; a GPU machine brings its own torch (pyproject keeps a lower bound).
TORCH_SPEC ?= torch==2.13.0

.PHONY: install install-test test reproduce robustness report clean-results

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e '.[hf]'

# The interpreter extra (Triton for the fused kernels' CPU tests) on a CPU build of torch only: a CUDA build pins
# its own Triton, which runs the same kernels on the GPU.
install-test: $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[test,slurm$$($(BIN)/python -c 'import torch; print("" if torch.version.cuda else ",interpreter")')]"

test: install-test
	$(BIN)/python -m pytest -q -n 2 --durations=15 tests --ignore=tests/cluster

# The workflow's train, evaluate and che jobs run in forks of one warm process (`dape serve`,
# dape_core/job_server.py): the same results without Python's start and torch's import in every job.
# DAPE_JOB_SERVER= (empty) runs each job in its own process.
DAPE_JOB_SERVER ?= auto
SERVE = $(if $(DAPE_JOB_SERVER),$(BIN)/dape serve,@true)
reproduce robustness: export DAPE_JOB_SERVER := $(DAPE_JOB_SERVER)

# A lock left by a killed Snakemake is cleared first (one printed line); a running Snakemake's lock stops make.
SNAKEMAKE_ARGS = --profile profiles/default --cores $(CORES) --configfile $(CONFIG)

# dape verify sets aside every damaged result (one line each, under results/.damaged/) and names every expected one
# that is gone; --forcerun of those not yet remade (dape verify --pending) redoes them and what depends on them. The
# HTML report is written under a temporary name and moved into place when finished (dape_core.report_html).
reproduce: install
	$(BIN)/python -m dape_core.workflow_lock -- $(SNAKEMAKE_ARGS)
	$(BIN)/dape verify --results results --reports $(REPORTS) --configfile $(CONFIG)
	$(SERVE) --detach
	$(BIN)/snakemake $(SNAKEMAKE_ARGS) $$($(BIN)/dape verify --results results --pending)
	$(BIN)/python -m dape_core.report_html $(REPORTS)/report.html -- $(BIN)/snakemake $(SNAKEMAKE_ARGS)
	$(SERVE) --stop

# Runs this configuration's grid too where its claims are missing: both runs' verdicts are needed.
robustness: install
	$(BIN)/python -m dape_core.workflow_lock -- $(SNAKEMAKE_ARGS)
	$(BIN)/dape verify --results results --reports $(REPORTS) --configfile $(CONFIG)
	$(SERVE) --detach
	$(BIN)/snakemake $(REPORTS)/robustness.md $(SNAKEMAKE_ARGS) $$($(BIN)/dape verify --results results --pending)
	$(SERVE) --stop

clean-results:
	rm -rf results reports/*.csv reports/tables reports/figures reports/report.html
