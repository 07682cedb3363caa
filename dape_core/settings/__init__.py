"""Every setting, declared once as a torch-free dataclass field with its default, allowed values and help.

:mod:`~dape_core.settings.fields` turns fields into command-line options and back; the dataclasses are
:class:`~dape_core.settings.attention.AttentionSettings` (encoding, processor and the path computing them) and
the settings of each stage that extend or sit beside it: ``model`` (GPTConfig, EncoderConfig), ``training``,
``evaluation``, ``timing``, ``che`` and ``finetune``. The modules that run a stage (``dape_core.train``, …) import
their settings from here, so building the workflow's plan never imports torch.
"""

from dape_core.settings.fields import (add_arguments, check_choices, choices, defaults,
                                       field_names, from_args, option_name, setting)
from dape_core.settings.attention import ATTENTION_IMPLS, DAPE_DTYPES, PADDINGS, PROCESSORS, AttentionSettings

__all__ = ["ATTENTION_IMPLS", "DAPE_DTYPES", "PADDINGS", "PROCESSORS",
           "AttentionSettings", "add_arguments", "check_choices", "choices", "defaults", "field_names", "from_args",
           "option_name", "setting"]
