"""The settings of a CHE run (che-spec: the reference benchmark's model and protocol), torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from dape_core.errors import ConfigError, require_positive
from dape_core.settings.attention import AttentionSettings
from dape_core.settings.fields import check_choices, setting

#: the 15 tasks of che-spec, as dape_core.che.tasks registers them (a test keeps the two equal; the settings layer
#: imports nothing above it, so the task-dependent checks live in dape_core.che.tasks.check_positions)
TASK_NAMES = ("even_pairs", "modular_arithmetic", "parity_check", "cycle_navigation", "stack_manipulation",
              "reverse_string", "modular_arithmetic_brackets", "solve_equation", "duplicate_string",
              "missing_duplicate", "odds_first", "binary_addition", "binary_multiplication", "compute_sqrt",
              "bucket_sort")

#: AttentionSettings fields that do not apply to the (non-causal) CHE encoder: it sees every key, so tril is off
NOT_CHE_OPTIONS = ("tril",)


@dataclass(kw_only=True)
class CHESettings(AttentionSettings):
    """One run: the task, the attention settings, the model (che-spec: 5 layers, width 64, 8 heads, FFN 256,
    dropout 0.1) and the protocol (defaults: the reference benchmark's)."""

    task: str = setting("even_pairs", choices=TASK_NAMES, help="one of the 15 CHE tasks")
    n_layer: int = setting(5, help="encoder layers")
    d_model: int = setting(64, help="encoder width")
    n_head: int = setting(8, help="attention heads")
    d_ff: int = setting(256, help="feed-forward width")
    dropout: float = setting(0.1, help="dropout")
    seed: int = setting(0, help="seed of the initialisation, the training samples and the evaluation samples")
    lr: float = setting(5e-4, help="Adam learning rate, one per run (the reference sweeps 1e-4, 3e-4, 5e-4)")
    steps: int = setting(200_000, help="training steps")
    batch_size: int = setting(128, help="training batch")
    train_max_len: int = setting(40, help="training lengths 1…train_max_len")
    eval_min_len: int = setting(41, help="first out-of-distribution length")
    eval_max_len: int = setting(500, help="last out-of-distribution length")
    eval_samples: int = setting(512, help="samples per evaluated length")
    eval_batch_size: int = setting(64, help="samples per evaluation forward")
    eval_score_budget: int = setting(2**24, help="batch × T² attention scores per evaluation forward (memory)")
    randomized_positions: bool = setting(True, help="sorted random positions from [0, max_position) per batch "
                                                    "(Ruoss et al., 2023)")
    max_position: int = setting(2048, help="range of the randomised positions")
    threads: int = setting(2, help="CPU threads")

    def __post_init__(self):
        super().__post_init__()
        check_choices(self, CHESettings)
        for name in ("n_layer", "d_model", "n_head", "d_ff", "steps", "batch_size",
                     "train_max_len", "eval_min_len", "eval_max_len", "eval_samples", "eval_batch_size",
                     "eval_score_budget", "max_position", "threads"):  # fmt: skip
            require_positive(name, getattr(self, name))
        require_positive("lr", self.lr, integer=False)
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"dropout: {self.dropout!r} is not allowed; allowed values: 0 ≤ x < 1")
        if self.eval_max_len < self.eval_min_len:
            raise ConfigError(f"eval_max_len: {self.eval_max_len} is not allowed; allowed values: ≥ eval_min_len "
                              f"({self.eval_min_len})")

    @property
    def eval_lengths(self) -> list[int]:
        """In-distribution lengths 1…train_max_len, then the out-of-distribution range."""
        return sorted({*range(1, self.train_max_len + 1), *range(self.eval_min_len, self.eval_max_len + 1)})

