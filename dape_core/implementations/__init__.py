"""Faster implementations of the score processor, one module each, each with one contract: it equals
``ScoreProcessor.forward`` (:mod:`dape_core.dape`, the paper's materialised form and the reference) on outputs and
gradients, which the tests prove (``tests/test_performance_paths.py``, ``tests/test_attention.py``).

``attention_impl`` (:class:`~dape_core.settings.AttentionSettings`) chooses the path of a model:

* ``plain`` — the reference itself (materialised [batch, 2H, T, T], ``nn.Conv2d``); kept selectable because the
  paper's timing table measured it;
* ``fast`` — :mod:`dape_core.implementations.blocked`: blocked GEMMs shaped for a CPU core's caches, with the
  hidden map recomputed in the backward pass.

A new implementation is a module here with a function of the same signature as
:func:`~dape_core.implementations.blocked.blocked_scores`, its name in ``ATTENTION_IMPLS`` and an exactness test.
"""
