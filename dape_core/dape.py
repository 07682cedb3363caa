"""The DAPE score processor: A + B + f(tril([A; B])) for DAPE V1 (kernel 1, the MLP) and DAPE V2 (kernel 1×k).

Paper eq. (2)–(5) and appendix L. A = q·kᵀ/√d, B the encoding's additive bias, f = Conv2(LeakyReLU(Conv1(·))) over
the channel axis (2H → D_DAPE → H) with a (1, k) kernel along the keys; DAPE V1 is k = 1, written as the DAPE paper's
MLP (Linear–LeakyReLU–Linear over heads at each (i, j)). Without a bias (NoPE, RoPE) f sees the H score channels
alone: A + f(A) (eq. 4).

Settings (:class:`~dape_core.settings.AttentionSettings`):
* ``tril`` zeroes keys right of the query in every channel before Conv1; off is the paper's §4.5 leakage ablation.
* ``padding``: ``same`` pads k//2 on both sides, as the appendix-L code; ``causal`` pads k−1 on the left only, as the
  text of §3.3 says ("padding of k−1"). ``same`` lets the output at (i, j) read inputs up to j + 2·(k//2), future
  keys without tril; ``causal`` never reads right of j, so it stays causal even without tril.

``ScoreProcessor.forward`` is the paper's materialised form and the reference ([batch, 2H, Tq, Tk] through
``nn.Conv2d``); its optional ``key_mask`` treats keys a host model's mask removes as the convolutions' zero padding,
so a left-padded sequence's real tokens get the unpadded scores. ``zero_init_output`` starts a processor as the
identity (f = 0), for adding DAPE to a trained model. Faster paths, each proven equal to ``forward`` by the tests:
:mod:`dape_core.implementations`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dape_core.errors import ConfigError
from dape_core.settings import AttentionSettings

NEGATIVE_SLOPE = 0.01  # LeakyReLU of appendix L


class ScoreProcessor(nn.Module):
    """One layer's DAPE processor (paper eq. 5); every layer has its own."""

    def __init__(self, n_head: int, settings: AttentionSettings, *, bias_channels: bool = True,
                 zero_init_output: bool = False):
        super().__init__()
        if settings.processor == "none":
            raise ConfigError("processor: 'none' is not allowed for a ScoreProcessor; allowed values: dape_v1, "
                              "dape_v2 (build_processor returns None for none)")
        self.processor = settings.processor
        self.kernel_size = settings.kernel_size
        self.dape_width = settings.dape_width
        self.n_head = n_head
        self.tril = settings.tril
        self.padding = settings.padding
        self.bias_channels = bias_channels
        in_channels = 2 * n_head if bias_channels else n_head
        width = settings.dape_width
        if self.processor == "dape_v1":
            self.mlp = nn.Sequential(nn.Linear(in_channels, width), nn.LeakyReLU(NEGATIVE_SLOPE),
                                     nn.Linear(width, n_head))
        else:
            self.conv1 = nn.Conv2d(in_channels, width, kernel_size=(1, self.kernel_size))
            self.conv2 = nn.Conv2d(width, n_head, kernel_size=(1, self.kernel_size))
        if zero_init_output:
            self.zero_output_layer()

    def output_layer(self) -> nn.Module:
        """The layer that produces f: Conv2 (DAPE V2) or the MLP's last Linear (DAPE V1)."""
        return self.mlp[2] if self.processor == "dape_v1" else self.conv2

    @torch.no_grad()
    def zero_output_layer(self) -> None:
        """f = 0, so the processor returns A + B (eq. 5 with a zero second layer): the identity on a trained model."""
        nn.init.zeros_(self.output_layer().weight)
        nn.init.zeros_(self.output_layer().bias)

    @property
    def left_padding(self) -> int:
        """Zero columns left of key 0: k//2 with ``same`` padding, k−1 with ``causal``."""
        return self.kernel_size // 2 if self.padding == "same" else self.kernel_size - 1

    @property
    def reach(self) -> int:
        """Key columns right of j that one convolution reads at j: k//2 with ``same`` padding, else 0."""
        return self.kernel_size - 1 - self.left_padding

    def needed_halo(self) -> int:
        """Key columns right of the last query row a causal output needs: one reach with tril (the inputs there are
        zero, only Conv1's output is read), both convolutions' reaches without (2·(k//2) with ``same``)."""
        return self.reach if self.tril else 2 * self.reach

    def _pad(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, (self.left_padding, self.reach))

    def feature_map(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        """f: [batch, C, Tq, Tk] → [batch, H, Tq, Tk] (Conv2 ∘ LeakyReLU ∘ Conv1, or the MLP for V1); Conv1's
        output is zeroed where ``key_mask`` (broadcastable to [batch, 1, Tq, Tk]) is False."""
        if self.processor == "dape_v1":  # pointwise: an absent key's output is never read by another key
            return self.mlp(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        hidden = F.leaky_relu(self.conv1(self._pad(x)), NEGATIVE_SLOPE)
        if key_mask is not None:
            hidden = hidden * key_mask.to(hidden.dtype)
        return self.conv2(self._pad(hidden))

    def forward(self, scores: torch.Tensor, bias: torch.Tensor | None, row_offset: int = 0,
                key_mask: torch.Tensor | None = None) -> torch.Tensor:
        """A + B + f(tril([A; B])) for query rows ``row_offset …`` and all given keys (eq. 5); the reference.

        ``key_mask`` (bool, broadcastable to [batch, 1, Tq, Tk]): False where a key is absent for a row, treated as
        the convolutions' zero padding. Future keys are tril's business: a caller passes them as present."""
        batch, _, tq, tk = scores.shape
        if self.bias_channels:
            if bias is None:
                raise ValueError("this processor was built for an encoding with a bias, but got none")
            bias = bias.expand(batch, -1, -1, -1)  # [H, Tq, Tk] or [batch or 1, H, Tq, Tk]
            x = torch.cat([scores, bias], dim=1)
            base = scores + bias
        else:
            x, base = scores, scores
        if self.tril:
            rows = torch.arange(tq, device=scores.device)[:, None] + row_offset
            keep = torch.arange(tk, device=scores.device)[None, :] <= rows
            x = x * keep.to(x.dtype)
        if key_mask is not None:
            x = x * key_mask.to(x.dtype)
        return base + self.feature_map(x, key_mask)


def build_processor(n_head: int, settings: AttentionSettings, *, bias_channels: bool = True,
                    zero_init_output: bool = False) -> ScoreProcessor | None:
    """``None`` for processor ``none``; a ScoreProcessor otherwise (``zero_init_output``: f = 0 at the start)."""
    if settings.processor == "none":
        return None
    return ScoreProcessor(n_head, settings, bias_channels=bias_channels, zero_init_output=zero_init_output)
