"""The settings of a timing run (Table 7, appendix H, §4.2), torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from dape_core.errors import ConfigError, require_positive
from dape_core.settings.attention import AttentionSettings
from dape_core.settings.fields import check_choices, setting
from dape_core.settings.model import SIZE_PRESETS

MODES = ("forward", "train_step")
#: the settings a timing job's methods may differ in beside their attention: each size is a method of the job, so
#: every size is timed in every block, interleaved (``dape time --methods``)
TIMED_SHAPE = ("size", "n_layer")
PRECISIONS = ("fp32", "bf16", "fp16")


@dataclass(kw_only=True)
class TimingSettings(AttentionSettings):
    """One timing run: the attention settings, the timed shape and the protocol (Table 7, §4.2)."""

    size: str = setting("small", choices=tuple(SIZE_PRESETS), help="shape preset of the timed model")
    n_layer: int | None = setting(None, help="reduced depth for shapes that do not fit")
    vocab_size: int = setting(50257, help="vocabulary of the timed model (GPT-2's for Table 7)")
    seq_lens: list[int] = setting(default_factory=lambda: [512], help="lengths, each a cell of fresh worker processes")
    batch_size: int | None = setting(1, help="sequences per forward (replaced by equal_tokens / seq_len)")
    equal_tokens: int | None = setting(None, help="batch = EQUAL_TOKENS / seq_len (§4.2)")
    mode: str = setting("forward", choices=MODES, help="forward, or a training step (forward, backward, AdamW)")
    repeats: int = setting(10, help="timed runs per method and length in each block, interleaved (the median over "
                                    "every block's is reported)")
    blocks: int = setting(1, help="blocks per length in each replicate job, each of fresh worker processes timing "
                                  "`repeats` interleaved rounds of every method and size")
    replicates: int = setting(2, help="separate jobs (results/timing/JOB/rep0, rep1, …) the cell's blocks are "
                                      "spread over: what changes between jobs varies the ratio too, so the timing "
                                      "claim's interval reads one value per replicate job (t over jobs, ν = "
                                      "replicates − 1)")
    warmup: int = setting(2, help="untimed runs first (discarded)")
    query_chunk_size: int | None = setting(None, help="exact query-chunked attention beyond this many rows")
    precision: str = setting("fp32", choices=PRECISIONS,
                             help="fp32, or bf16 / fp16 autocast (the paper timed fp16, appendix I Table 8)")
    threads: int = setting(2, help="CPU threads the job holds")
    compute_threads: int | None = setting(None, help="torch threads of each timed worker (default: threads); fewer "
                                                     "than the job holds leaves the rest to the host")

    def __post_init__(self):
        super().__post_init__()
        check_choices(self, TimingSettings)
        for name in ("repeats", "blocks", "replicates", "threads", *(("n_layer",) if self.n_layer is not None else ()),
                     *(("compute_threads",) if self.compute_threads is not None else ())):
            require_positive(name, getattr(self, name))
        if self.compute_threads is not None and self.compute_threads > self.threads:
            raise ConfigError(f"compute_threads: {self.compute_threads} is more than the job's threads "
                              f"({self.threads}); allowed values: 1 … {self.threads}")
        for n in self.seq_lens:
            require_positive("seq_lens", n)
        if self.equal_tokens is not None:
            require_positive("equal_tokens", self.equal_tokens)
            self.batch_size = None  # equal tokens replace the batch size
        elif self.batch_size is None:
            raise ConfigError("batch_size: give --batch-size or --equal-tokens; allowed values: a positive integer")
        else:
            require_positive("batch_size", self.batch_size)
