"""The 15 tasks of the Chomsky Hierarchy Evaluation (CHE) benchmark behind Table 6 (appendix G).

Definitions follow Delétang et al. (ICLR 2023) as run by Ruoss et al. (ACL 2023): for the same input a task's
``target`` gives the same target and accuracy mask as the reference benchmark, including its conventions at small
lengths. Every task works on token ids (int64 arrays), samples whole batches from a ``numpy.random.Generator`` and
computes the target of *any* input batch of its language, not only of sampled ones. One module per level of the
hierarchy (``regular``, ``context_free``, ``context_sensitive``) registers its tasks (``@register``, ``base``) in the
order of the reference's tables.
"""

# in the order the tasks register (the order of the `task` setting's allowed values and of Table 6's rows)
from dape_core.che.tasks.base import TASKS, Task, check_positions, get_task, register  # isort: skip
from dape_core.che.tasks import regular, context_free, context_sensitive  # isort: skip  # noqa: F401

__all__ = ["TASKS", "Task", "check_positions", "get_task", "register"]
