"""The shapes of the decoder and the CHE encoder, torch-free: size presets, their settings over the attention
settings, and the position checks a configuration meets before any model is built.

Size presets (paper appendix I, Table 8; 2.7B and 6.7B follow GPT-3's shapes): ``125M`` is nominal, as in the public
code without weight tying — ≈85M non-embedding parameters (12 × 12 × 768²).
"""

from __future__ import annotations

from dataclasses import dataclass

from dape_core.encoding_facts import facts
from dape_core.errors import ConfigError, require_choice, require_positive
from dape_core.settings.attention import AttentionSettings
from dape_core.settings.fields import setting

# name -> (n_layer, n_head, d_model)
SIZE_PRESETS: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 4, 64),  # tests
    "small": (2, 4, 128),  # the default CPU miniature
    "medium": (4, 8, 256),  # a larger CPU miniature (model-size family)
    "125M": (12, 12, 768),  # paper appendix I
    "350M": (24, 16, 1024),  # paper appendix I
    "2.7B": (32, 32, 2560),  # GPT-3 shape, paper appendix C / Table 3
    "6.7B": (32, 32, 4096),  # GPT-3 shape, paper Table 7
}


@dataclass(kw_only=True)
class GPTConfig(AttentionSettings):
    """Decoder settings: the attention settings plus the shape; ``size`` fills n_layer/n_head/d_model unless
    given explicitly."""

    vocab_size: int = 4096
    size: str | None = setting("small", choices=tuple(SIZE_PRESETS), help="shape preset (n_layer, n_head, d_model)")
    n_layer: int | None = setting(None, help="override the preset's depth")
    n_head: int | None = setting(None, help="override the preset's heads")
    d_model: int | None = setting(None, help="override the preset's width")
    d_ff: int | None = None  # default 4 × d_model
    dropout: float = setting(0.0, help="dropout (paper appendix I: 0)")
    train_len: int = setting(512, help="training length (FIRE's L_init is half of it)")
    tie_embeddings: bool = setting(False, help="tie input and output embeddings (public code: untied)")
    max_position: int = setting(8192, help="randrope: positions drawn from [0, max_position), ≥ the longest "
                                           "evaluation length (Ruoss et al., 2023)")
    query_chunk_size: int | None = None  # exact query-chunked attention beyond this many rows

    def __post_init__(self):
        super().__post_init__()
        resolve_shape(self)
        require_positive("vocab_size", self.vocab_size)
        require_positive("max_position", self.max_position)
        if facts(self.encoding).randomized_positions and self.train_len > self.max_position:
            raise ConfigError(f"max_position: {self.max_position} is not allowed with train_len {self.train_len}; "
                              "allowed values: ≥ train_len (positions are drawn from [0, max_position))")
        if self.query_chunk_size is not None:
            require_positive("query_chunk_size", self.query_chunk_size)


@dataclass(kw_only=True)
class EncoderConfig(AttentionSettings):
    """CHE encoder settings (che-spec: 5 layers, width 64, 8 heads, FFN ×4 ReLU, post-LN, dropout 0.1); the
    encoder is not causal, so ``tril`` does not apply to it."""

    input_vocab: int = 2
    output_vocab: int = 2
    n_layer: int = 5
    d_model: int = 64
    n_head: int = 8
    d_ff: int | None = None
    dropout: float = 0.1
    train_len: int = 40
    size: str | None = None

    def __post_init__(self):
        super().__post_init__()
        resolve_shape(self)
        require_positive("input_vocab", self.input_vocab)
        require_positive("output_vocab", self.output_vocab)


def resolve_shape(cfg) -> None:
    """Fill n_layer/n_head/d_model from the size preset (explicit values win) and d_ff = 4·d_model."""
    if cfg.size is not None:
        require_choice("size", cfg.size, SIZE_PRESETS)
        n_layer, n_head, d_model = SIZE_PRESETS[cfg.size]
        cfg.n_layer = cfg.n_layer or n_layer
        cfg.n_head = cfg.n_head or n_head
        cfg.d_model = cfg.d_model or d_model
    for field in ("n_layer", "n_head", "d_model"):
        if getattr(cfg, field) is None:
            raise ConfigError(f"{field}: missing; allowed values: a positive integer, or a size preset: "
                              f"{', '.join(SIZE_PRESETS)}")
        require_positive(field, getattr(cfg, field))
    if cfg.d_model % cfg.n_head:
        raise ConfigError(f"d_model: {cfg.d_model} is not divisible by n_head {cfg.n_head}; "
                          "allowed values: multiples of n_head")
    cfg.d_ff = cfg.d_ff or 4 * cfg.d_model


def layer_sizes(cfg) -> tuple[int, int, int]:
    """(heads, head size, D_DAPE) of a model's attention layers: what decides whether ``auto`` runs the fused kernel
    (:func:`dape_core.implementations.resolve_attention_impl`)."""
    return cfg.n_head, cfg.d_model // cfg.n_head, cfg.dape_width


def randomized(cfg) -> bool:
    """Whether a model (anything with an ``encoding``) is trained and evaluated at random positions."""
    return facts(cfg.encoding).randomized_positions


def require_max_position(cfg, length: int, field: str) -> None:
    """A randomized model can only place ``length`` ≤ ``max_position`` positions (the error names ``field``)."""
    if randomized(cfg) and length > cfg.max_position:
        raise ConfigError(f"{field}: {length} exceeds max_position {cfg.max_position} of encoding {cfg.encoding!r} "
                          f"(positions are drawn from [0, max_position)); allowed values: ≤ {cfg.max_position}, "
                          "or train with a larger max_position")
