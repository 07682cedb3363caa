"""Token positions: 0 … T−1, or the sorted random positions of randomized positional encodings.

Randomized positional encodings (Ruoss et al., 2023) give a sequence of length T the sorted positions of T indices
drawn without replacement from [0, L_max), L_max = ``max_position`` ≥ the longest evaluation length, so training has
seen every position and distance; :func:`draw_positions` serves the CHE runner (Table 6) and language models whose
encoding declares ``randomized_positions``. Language models seed each draw by integers alone: a training
micro-batch's by (seed, step, micro-batch), as its data (``dape_core.train.batch_starts``), so a resumed run draws the
same; an evaluation window's by (seed, length, window), so perplexity does not depend on batching.
"""

from __future__ import annotations

import numpy as np
import torch

from dape_core.errors import ConfigError
from dape_core.settings.model import randomized, require_max_position

#: the last entropy word of every position generator: keeps the position draws of (seed, step, micro) apart from
#: the data draws of the same (seed, step, micro) (ASCII "pos")
POSITION_STREAM = 0x706F73


def draw_positions(rng: np.random.Generator, length: int, max_position: int) -> torch.Tensor:
    """Sorted positions drawn without replacement from [0, max_position) (Ruoss et al., 2023): int64 [length]."""
    if length > max_position:
        raise ConfigError(f"max_position: {max_position} is not allowed for a sequence of {length} positions; "
                          f"allowed values: ≥ {length}")
    return torch.from_numpy(np.sort(rng.choice(max_position, size=length, replace=False)))


def consecutive(positions: torch.Tensor) -> bool:
    """Whether ``positions`` [T] step by 1 (a relative bias is then a function of the index difference). Under
    ``torch.compile`` False without reading them (a host read breaks the graph and syncs the device): False only
    forgoes a shortcut (the blocked path's per-distance Conv1), never exactness."""
    if torch.compiler.is_compiling():
        return False
    return bool((positions[1:] - positions[:-1] == 1).all())


def training_positions(cfg, seed: int, step: int, micro: int, length: int) -> torch.Tensor | None:
    """Positions of one training micro-batch (shared by its sequences): None (0 … T−1) unless the encoding is
    randomized, else a draw depending on (seed, step, micro) alone."""
    if not randomized(cfg):
        return None
    return draw_positions(np.random.default_rng([seed, step, micro, POSITION_STREAM]), length, cfg.max_position)


def evaluation_positions(cfg, seed: int, length: int, window: int) -> torch.Tensor | None:
    """Positions of one evaluation window of ``length`` tokens: None (0 … T−1) unless the encoding is randomized,
    else a draw depending on (seed, length, window) alone (Ruoss et al. sample at test time too)."""
    if not randomized(cfg):
        return None
    return draw_positions(np.random.default_rng([seed, length, window, POSITION_STREAM]), length, cfg.max_position)


__all__ = ["POSITION_STREAM", "draw_positions", "consecutive", "randomized", "require_max_position",
           "training_positions", "evaluation_positions"]
