"""The DAPE score processor: A + B + f(tril([A; B])) for DAPE V1 (kernel 1, the MLP) and DAPE V2 (kernel 1×k).

Paper eq. (2)–(5) and appendix L. A = q·kᵀ/√d, B the encoding's additive bias. f is
Conv2(LeakyReLU(Conv1(·))) over the channel axis (2H → D_DAPE → H) with a (1, k) kernel along the keys; DAPE V1
is the same with k = 1, written as the MLP of the DAPE paper (Linear–LeakyReLU–Linear over heads at each (i, j)).
For encodings without a bias (NoPE, RoPE) f sees the H score channels alone: A + f(A) (eq. 4).

Settings:
* ``tril`` (default True) zeroes keys right of the query in every channel before Conv1; False is the paper's
  §4.5 leakage ablation.
* ``padding``: ``same`` pads k//2 on both sides, as the appendix-L code; ``causal`` pads k−1 on the left only,
  as the text of §3.3 says ("padding of k−1"). With ``same`` the output at (i, j) reads inputs up to
  j + 2·(k//2), so without tril it sees future keys; with ``causal`` it never reads right of j, so it stays causal
  even without tril.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dape_core.errors import ConfigError, require_choice, require_odd_kernel, require_positive

PROCESSORS = ("none", "dape_v1", "dape_v2")
PADDINGS = ("same", "causal")


class ScoreProcessor(nn.Module):
    """One layer's DAPE processor (paper eq. 5); every layer has its own."""

    def __init__(
        self,
        n_head: int,
        *,
        processor: str = "dape_v2",
        kernel_size: int = 3,
        dape_width: int = 32,
        tril: bool = True,
        padding: str = "same",
        bias_channels: bool = True,
    ):
        super().__init__()
        require_choice("processor", processor, PROCESSORS[1:])
        require_odd_kernel("kernel_size", kernel_size)
        require_positive("dape_width", dape_width)
        require_choice("padding", padding, PADDINGS)
        if processor == "dape_v1" and kernel_size != 1:
            raise ConfigError(
                f"kernel_size: {kernel_size} is not allowed with processor dape_v1; allowed values: 1 "
                "(use processor dape_v2 for 1×k kernels)"
            )
        self.processor = processor
        self.kernel_size = kernel_size
        self.dape_width = dape_width
        self.tril = tril
        self.padding = padding
        self.bias_channels = bias_channels
        in_channels = 2 * n_head if bias_channels else n_head
        if processor == "dape_v1":
            self.mlp = nn.Sequential(nn.Linear(in_channels, dape_width), nn.LeakyReLU(0.01), nn.Linear(dape_width, n_head))
        else:
            self.conv1 = nn.Conv2d(in_channels, dape_width, kernel_size=(1, kernel_size))
            self.conv2 = nn.Conv2d(dape_width, n_head, kernel_size=(1, kernel_size))

    @property
    def right_halo(self) -> int:
        """Key columns right of j that the output at j reads: 2·(k//2) with ``same`` padding, else 0."""
        return 2 * (self.kernel_size // 2) if self.padding == "same" and self.processor == "dape_v2" else 0

    def _pad(self, x: torch.Tensor) -> torch.Tensor:
        h = self.kernel_size // 2
        left, right = (h, h) if self.padding == "same" else (self.kernel_size - 1, 0)
        return F.pad(x, (left, right))

    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        """f: [batch, C, Tq, Tk] → [batch, H, Tq, Tk] (Conv2 ∘ LeakyReLU ∘ Conv1, or the MLP for V1)."""
        if self.processor == "dape_v1":
            return self.mlp(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        hidden = F.leaky_relu(self.conv1(self._pad(x)), 0.01)
        return self.conv2(self._pad(hidden))

    def forward(self, scores: torch.Tensor, bias: torch.Tensor | None, row_offset: int = 0) -> torch.Tensor:
        """A + B + f(tril([A; B])) for query rows ``row_offset …`` and all given keys (eq. 5)."""
        batch, _, tq, tk = scores.shape
        if self.bias_channels:
            if bias is None:
                raise ValueError("this processor was built for an encoding with a bias, but got none")
            bias = bias.expand(batch, -1, -1, -1) if bias.dim() == 4 else bias.unsqueeze(0).expand(batch, -1, -1, -1)
            x = torch.cat([scores, bias], dim=1)
            base = scores + bias
        else:
            x, base = scores, scores
        if self.tril:
            rows = torch.arange(tq, device=scores.device)[:, None] + row_offset
            keep = torch.arange(tk, device=scores.device)[None, :] <= rows
            x = x * keep.to(x.dtype)
        return base + self.feature_map(x)


def build_processor(
    n_head: int,
    *,
    processor: str,
    kernel_size: int = 1,
    dape_width: int = 32,
    tril: bool = True,
    padding: str = "same",
    bias_channels: bool = True,
) -> ScoreProcessor | None:
    """``None`` for processor ``none``; a ScoreProcessor otherwise (settings validated, errors name the field)."""
    require_choice("processor", processor, PROCESSORS)
    if processor == "none":
        return None
    return ScoreProcessor(
        n_head,
        processor=processor,
        kernel_size=kernel_size,
        dape_width=dape_width,
        tril=tril,
        padding=padding,
        bias_channels=bias_channels,
    )
