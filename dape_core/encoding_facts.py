"""What each positional encoding is, without torch: the one home of its name, display name and shape facts.

``dape_core.encodings`` registers one module class under each name here and takes its facts from here; the settings,
method labels, plan and estimates read them without importing torch (building the DAG never imports it).
``tests/test_encoding_facts.py`` checks every fact against its module (``has_bias``, sharing, random positions, one
instance's learned parameters).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from dape_core.errors import require_choice

FIRE_WIDTH = 32  # FIRE's f_θ = Linear(1, 32)–ReLU–Linear(32, H) (Li et al., 2023)
T5_BUCKETS = 32  # T5's relative buckets, as the public code
T5_MAX_DISTANCE = 128
COPE_NPOS_MAX = 64  # CoPE's largest contextual position (Golovneva et al., 2024)


def _none(n_head: int, head_dim: int, causal: bool) -> int:
    return 0


def _sides(causal: bool) -> int:
    """A decoder's encoding sees keys left of the query; the CHE encoder's keeps a second set for the right."""
    return 1 if causal else 2


@dataclass(frozen=True)
class EncodingFacts:
    """One encoding: ``display`` (tables, method labels), ``has_bias`` (adds B, so the DAPE processor reads 2h
    channels, paper eq. 4), ``randomized_positions`` (trained and evaluated at random positions, Ruoss et al., 2023),
    ``shared_by_default`` (one module for all layers; in the public code only T5's table) and
    ``parameters(n_head, head_dim, causal)``: one instance's learned parameters."""

    display: str
    has_bias: bool
    randomized_positions: bool = False
    shared_by_default: bool = False
    parameters: Callable[[int, int, bool], int] = _none


#: the registry, read live: an entry added here (docs/extending.md) is an allowed ``encoding`` everywhere
ENCODING_FACTS: dict[str, EncodingFacts] = {
    "nope": EncodingFacts("NoPE", has_bias=False),
    "rope": EncodingFacts("RoPE", has_bias=False),
    "yarn": EncodingFacts("YaRN", has_bias=False),
    "randrope": EncodingFacts("RandRoPE", has_bias=False, randomized_positions=True),
    "alibi": EncodingFacts("ALiBi", has_bias=True),
    # r1, r2 per head (and side)
    "kerple": EncodingFacts("Kerple", has_bias=True, parameters=lambda h, d, causal: 2 * _sides(causal) * h),
    # f_θ's two linear layers, c and L_multiplier
    "fire": EncodingFacts("FIRE", has_bias=True,
                          parameters=lambda h, d, causal: 2 * FIRE_WIDTH + FIRE_WIDTH * h + h + 2),
    "t5": EncodingFacts("T5", has_bias=True, shared_by_default=True, parameters=lambda h, d, causal: T5_BUCKETS * h),
    # one table of [head_dim, npos_max] per side
    "cope": EncodingFacts("CoPE", has_bias=True,
                          parameters=lambda h, d, causal: _sides(causal) * d * COPE_NPOS_MAX),
    # W_R [h·d, h·d] and the query-side biases u, v [h, d]
    "xl": EncodingFacts("XL", has_bias=True, parameters=lambda h, d, causal: (h * d) ** 2 + 2 * h * d),
}


def facts(encoding: str) -> EncodingFacts:
    """The facts of ``encoding`` (the error names the field and the allowed values)."""
    require_choice("encoding", encoding, ENCODING_FACTS)
    return ENCODING_FACTS[encoding]


def display_name(encoding: str) -> str:
    """The paper's name of an encoding ("Kerple", "RandRoPE", …)."""
    return facts(encoding).display


__all__ = ["COPE_NPOS_MAX", "ENCODING_FACTS", "EncodingFacts", "FIRE_WIDTH",
           "T5_BUCKETS", "T5_MAX_DISTANCE", "display_name", "facts"]
