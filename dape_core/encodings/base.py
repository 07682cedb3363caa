"""The encodings' common ground: the registry (``@register``), the base class with its two hooks, the geometry
shared by every layer of a forward pass, and NoPE, the encoding that adds nothing."""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable

import torch
from torch import nn

from dape_core.encoding_facts import facts
from dape_core.errors import require_choice

ENCODINGS: dict[str, type["PositionalEncoding"]] = {}


def register(name: str) -> Callable[[type], type]:
    """Class decorator: make an encoding available by ``name`` (config key), with its facts from
    :mod:`dape_core.encoding_facts` (bias, sharing, random positions)."""
    info = facts(name)

    def wrap(cls: type) -> type:
        cls.name = name
        cls.has_bias = info.has_bias
        cls.randomized_positions = info.randomized_positions
        cls.shared_by_default = info.shared_by_default
        ENCODINGS[name] = cls
        return cls

    return wrap


def relative_distance(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """i − j for every (query i, key j) pair: positive for keys to the left of the query."""
    return q_pos[:, None] - k_pos[None, :]


GEOMETRY_CACHE_BYTES = 32 * 2**20


def _position_key(pos: torch.Tensor):
    try:
        version = pos._version
    except RuntimeError:  # inference tensors carry no version counter (and are not modified in place)
        version = None
    return pos.device, pos.dtype, pos.data_ptr(), tuple(pos.shape), tuple(pos.stride()), version


class GeometryCache:
    """Parameter-free tensors derived from a pair of position vectors, shared by every layer of a forward pass.

    Keyed by what is built and by the two position tensors' identity (device, address, shape, strides, version
    counter); an entry holds those tensors, so their memory cannot be reused by other positions while it lives. Least
    recently used entries go first beyond ``max_bytes``; an entry larger than that is returned but not kept.
    """

    def __init__(self, max_bytes: int = GEOMETRY_CACHE_BYTES):
        self.max_bytes = max_bytes
        self.entries: OrderedDict = OrderedDict()
        self.bytes = 0
        self.hits = self.misses = 0

    def get(self, what: tuple, q_pos: torch.Tensor, k_pos: torch.Tensor, build: Callable[[], torch.Tensor]):
        """The entry ``what`` of (``q_pos``, ``k_pos``), built by ``build()`` on a miss; under ``torch.compile`` always
        built (the compiler shares the built tensors itself)."""
        if torch.compiler.is_compiling():
            return build()
        key = (what, _position_key(q_pos), _position_key(k_pos))
        entry = self.entries.get(key)
        if entry is not None:
            self.entries.move_to_end(key)
            self.hits += 1
            return entry[0]
        self.misses += 1
        value = build()
        size = value.numel() * value.element_size()
        if size <= self.max_bytes:
            self.entries[key] = (value, q_pos, k_pos, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                self.bytes -= self.entries.popitem(last=False)[1][3]
        return value

    def clear(self) -> None:
        self.entries.clear()
        self.bytes = 0


geometry = GeometryCache()


class PositionalEncoding(nn.Module):
    """Base class; subclasses override ``bias`` and/or ``rotate``."""

    name = "base"
    # set by ``register`` from dape_core.encoding_facts
    has_bias = True  # False: the DAPE processor sees the score channels alone (paper eq. 4)
    needs_scores = False  # True: the bias is a function of q·kᵀ (CoPE's gates)
    relative_bias = False  # True: B[i, j] depends on pos_i − pos_j alone (lets DAPE's Conv1 work per distance)
    shared_by_default = False  # one instance for all layers (public code: only the T5 table)
    randomized_positions = False  # True: trained and evaluated at random positions (dape_core.positions)

    def __init__(self, n_head: int, head_dim: int, *, causal: bool = True, train_len: int = 512, **_: object):
        super().__init__()
        self.n_head = n_head
        self.head_dim = head_dim
        self.causal = causal
        self.train_len = train_len

    def rotate(self, q, k, q_pos, k_pos):
        return q, k

    def bias(self, q, k, scores, q_pos, k_pos):  # pragma: no cover - overridden
        return None


def build_encoding(name: str, n_head: int, head_dim: int, **kwargs) -> PositionalEncoding:
    require_choice("encoding", name, ENCODINGS)
    return ENCODINGS[name](n_head, head_dim, **kwargs)


@register("nope")
class NoPE(PositionalEncoding):
    """No positional encoding (Kazemnejad et al., 2023): B = 0."""
