"""The settings of `dape evaluate` (paper §4: perplexity at many lengths, the last 256 tokens scored), torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from dape_core.errors import ConfigError, require_positive
from dape_core.settings.fields import setting


@dataclass(kw_only=True)
class EvalSettings:
    """Options of `dape evaluate`: which lengths, which tokens are scored, and the interval."""

    eval_lens: list[int] = setting(default_factory=lambda: [512, 1024, 2048, 4096, 8192],
                                   help="evaluation lengths (paper: 512 … 8192)")
    window: int = setting(256, help="score the last WINDOW tokens (paper: 256)")
    delta_p_window: int | None = setting(None, help="ΔP window of appendix A (default: the training length)")
    min_scored_tokens: int = setting(8192, help="fail below this many scored tokens per length")
    max_windows: int = setting(64, help="windows per length at most (seeded choice)")
    max_windows_within: int | None = setting(
        None, help="windows at most at lengths up to the training length, where a window is cheapest and the windows' "
                   "part of a comparison's seed noise largest: the max_windows of every length and more of the same "
                   "documents (default: max_windows)")
    batch_size: int = setting(8, help="windows per forward (1 beyond length 1024)")
    query_chunk_size: int = setting(1024, help="exact query-chunked attention beyond this length")
    bootstrap: int = setting(1000, help="bootstrap resamples of the perplexity interval (0: no interval)")
    seed: int = setting(0, help="seed of the window choice and the bootstrap")
    threads: int = setting(2, help="CPU threads")
    heatmap_len: int | None = setting(None, help="sequence length of the sink and heat-maps (default: train_len)")
    sink_sequences: int = setting(8, help="sequences of the attention-sink statistic at heatmap_len (App. K; the "
                                          "same windows for every run of a dataset)")

    def __post_init__(self):
        for length in self.eval_lens:
            require_positive("eval_lens", length)
        for name in ("window", "min_scored_tokens", "max_windows", "batch_size", "query_chunk_size", "threads",
                     "sink_sequences"):
            require_positive(name, getattr(self, name))
        require_resamples("bootstrap", self.bootstrap)
        for name in ("delta_p_window", "heatmap_len", "max_windows_within"):
            if getattr(self, name) is not None:
                require_positive(name, getattr(self, name))


def require_resamples(field: str, value) -> int:
    """A number of bootstrap resamples: an integer ≥ 0 (0: no interval)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{field}: {value!r} is not allowed; allowed values: an integer ≥ 0 (0: no interval)")
    return value
