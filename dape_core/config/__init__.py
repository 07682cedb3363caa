"""The experiment grid: a configuration (config.yaml, configs/*.yaml) validated and expanded into runs.

Modules: :mod:`~dape_core.config.schema` (JSON-schema validation and its messages), :mod:`~dape_core.config.families`
(families crossed into runs and checked: :func:`build_plan`), :mod:`~dape_core.config.grids` (a family's grids crossed
into settings), :mod:`~dape_core.config.plan` (the :class:`Plan`, its report spec), :mod:`~dape_core.config.names` (run
names), :mod:`~dape_core.config.sizes` (sizes checked before any job runs), :mod:`~dape_core.config.options` (a run's
settings as its rules' grouped options), :mod:`~dape_core.config.estimate` (jobs and GPU-hours from
:mod:`~dape_core.config.flops` and :mod:`~dape_core.config.calibration`). ``python -m dape_core.config CONFIG`` prints
each family's jobs and the estimate."""

from dape_core.config.checks import dataset_inputs, require_extras
from dape_core.config.estimate import estimate, estimate_line
from dape_core.config.families import build_plan
from dape_core.config.names import configuration_name, plan_path, reports_dir
from dape_core.config.options import (CliOptions, JobSpec, attention_map_options, che_options, corpus_options,
                                      eval_options, finetune_options, group, spec_digest, timing_job_options,
                                      timing_options, train_options)
from dape_core.config.plan import STAGES, Plan, write_report_spec
from dape_core.config.provenance import (attention_file, attention_map_spec, che_file, che_spec, corpus_spec, eval_spec,
                                         lm_file, planned_results, planned_spec, timing_file, timing_spec, train_spec)
from dape_core.config.schema import SCHEMA_PATH, check_yaml_files, load_yaml, validate_schema
from dape_core.config.sizes import check_sizes

__all__ = [
    "CliOptions", "JobSpec", "Plan", "SCHEMA_PATH", "STAGES", "attention_file", "attention_map_options",
    "attention_map_spec", "build_plan", "che_file", "che_options", "che_spec", "check_sizes", "check_yaml_files",
    "configuration_name", "corpus_options", "corpus_spec", "dataset_inputs", "estimate", "estimate_line",
    "eval_options", "eval_spec", "finetune_options", "group", "lm_file", "load_yaml", "plan_path", "planned_results",
    "planned_spec", "reports_dir", "require_extras", "spec_digest", "timing_file", "timing_job_options",
    "timing_options", "timing_spec", "train_options", "train_spec", "validate_schema", "write_report_spec",
]
