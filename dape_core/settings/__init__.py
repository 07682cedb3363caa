"""Every setting, declared once as a torch-free dataclass field with its default, allowed values and help.

:mod:`~dape_core.settings.fields` turns fields into command-line options and back; the dataclasses are
:class:`~dape_core.settings.attention.AttentionSettings` and each stage's settings beside or above it (``model``,
``training``, ``evaluation``, ``timing``, ``che``, ``finetune``). The stages import their settings from here, so
building the workflow's plan never imports torch.
"""

from dape_core.settings.fields import add_arguments, choices, defaults, field_names, from_args
from dape_core.settings.attention import ATTENTION_IMPLS, AttentionSettings

__all__ = ["ATTENTION_IMPLS", "AttentionSettings", "add_arguments", "choices", "defaults", "field_names", "from_args"]
