"""Binary numbers as little-endian bit rows, vectorised over the batch: the helpers of the binary tasks (infix
expressions: :mod:`dape_core.che.expressions`)."""

from __future__ import annotations

import numpy as np


def bits_to_ints(bits: np.ndarray) -> list[int]:
    """Little-endian bit rows [B, n] -> Python integers (exact for any n)."""
    if bits.shape[1] == 0:
        return [0] * bits.shape[0]
    packed = np.packbits(bits.astype(np.uint8), axis=1, bitorder="little")
    return [int.from_bytes(row.tobytes(), "little") for row in packed]


def ints_to_bits(values: list[int], width: int) -> np.ndarray:
    """Python integers (< 2**width) -> little-endian bit rows [B, width]."""
    n_bytes = max(1, (width + 7) // 8)
    raw = np.frombuffer(b"".join(v.to_bytes(n_bytes, "little") for v in values), dtype=np.uint8)
    return np.unpackbits(raw.reshape(len(values), n_bytes), axis=1, bitorder="little")[:, :width].astype(np.int64)


def nonzero_bit_rows(rng: np.random.Generator, widths: np.ndarray, total: int) -> np.ndarray:
    """Rows [B, total] of uniform bits, zero at column >= widths[b], each row a number in [1, 2**width - 1]."""
    inside = np.arange(total)[None, :] < widths[:, None]
    bits = rng.integers(0, 2, size=(len(widths), total)) * inside
    redraw = ~bits.any(axis=1)
    while redraw.any():  # rejection sampling keeps the law uniform on the non-zero numbers
        bits[redraw] = rng.integers(0, 2, size=(int(redraw.sum()), total)) * inside[redraw]
        redraw = ~bits.any(axis=1)
    return bits


def binary_result(values: list[int], end_token: int, width: int) -> np.ndarray:
    """Little-endian digits of each value ("0" for zero), then the end token, zero-padded to ``width``."""
    n_digits = np.array([max(v.bit_length(), 1) for v in values])
    out = np.where(np.arange(width)[None, :] < n_digits[:, None], ints_to_bits(values, width), 0)
    out[np.arange(len(values)), n_digits] = end_token
    return out


def split_operands(inputs: np.ndarray, separator: int) -> tuple[list[int], list[int], np.ndarray]:
    """Reads ``a sep b`` (little-endian operands) per row; rows without a separator give (number, 0, False)."""
    n_sep = (inputs == separator).sum(axis=1)
    if (n_sep > 1).any():
        raise ValueError("binary operations take at most one operator token per input")
    has_sep = n_sep == 1
    length = inputs.shape[1]
    sep_at = np.where(has_sep, np.argmax(inputs == separator, axis=1), length)
    columns = np.arange(length)[None, :]
    left_bits = np.where(columns < sep_at[:, None], inputs, 0)
    right_index = np.clip(columns + sep_at[:, None] + 1, 0, length - 1)
    right_bits = np.where(columns < (length - 1 - sep_at)[:, None], np.take_along_axis(inputs, right_index, 1), 0)
    return bits_to_ints(left_bits), bits_to_ints(right_bits), has_sep
