"""Which evaluation windows a validation split holds (torch-free): :mod:`dape_core.evaluate` scores them, and
:mod:`dape_core.config.sizes` refuses, before any job runs, evaluation lengths whose windows cannot exist."""

from __future__ import annotations

import numpy as np

from dape_core.errors import ConfigError

#: evaluation lengths above this run one window at a time (their activations grow with the length)
LONG_EVAL_LEN = 1024


def eval_batch(length: int, batch_size: int) -> int:
    """Windows per forward pass at an evaluation length: ``batch_size``, one above :data:`LONG_EVAL_LEN`."""
    return batch_size if length <= LONG_EVAL_LEN else 1


def window_anchors(doc_lengths: np.ndarray, max_len: int, window: int, max_windows: int | None, seed: int):
    """(document, end) pairs: targets are doc[end − L : end] and inputs doc[end − L − 1 : end − 1]."""
    anchors = []
    for doc in np.flatnonzero(doc_lengths >= max_len + 1):
        end = int(doc_lengths[doc])
        while end - max_len - 1 >= 0:
            anchors.append((int(doc), end))
            end -= window
    if max_windows is not None and len(anchors) > max_windows:
        rng = np.random.default_rng(seed)
        keep = np.sort(rng.choice(len(anchors), size=max_windows, replace=False))
        anchors = [anchors[i] for i in keep]
    return anchors


def more_anchors(doc_lengths: np.ndarray, max_len: int, window: int, anchors: list, total: int, seed: int) -> list:
    """``anchors`` (:func:`window_anchors`, unchanged and in order) plus, up to ``total``, more of the same documents'
    windows (seeded, a stream of its own)."""
    if total <= len(anchors):
        return anchors
    taken = set(anchors)
    pool = [a for a in window_anchors(doc_lengths, max_len, window, None, seed) if a not in taken]
    rng = np.random.default_rng([seed, 1])
    extra = np.sort(rng.choice(len(pool), size=min(total - len(anchors), len(pool)), replace=False))
    return list(anchors) + [pool[i] for i in extra]


def scored_tokens(doc_lengths: np.ndarray, length: int, window: int, max_windows: int | None) -> int:
    """Tokens scored at the longest evaluation length ``length``: its windows × min(window, length)."""
    windows = sum(max(0, (int(n) - length - 1) // window + 1) for n in doc_lengths if n >= length + 1)
    return min(windows, max_windows if max_windows is not None else windows) * min(window, length)


def longest_length(doc_lengths: np.ndarray, window: int, max_windows: int | None, min_scored_tokens: int,
                   below: int) -> int | None:
    """The longest evaluation length under ``below`` whose windows score ``min_scored_tokens`` (a bisection: the
    scored tokens fall as the length grows), None when none does."""
    low, high = 0, below - 1
    while low < high:
        middle = (low + high + 1) // 2
        if scored_tokens(doc_lengths, middle, window, max_windows) >= min_scored_tokens:
            low = middle
        else:
            high = middle - 1
    return low or None


def require_windows(doc_lengths: np.ndarray, length: int, window: int, max_windows: int | None,
                    min_scored_tokens: int, seed: int, field: str = "eval_lens") -> list:
    """The window anchors of the longest evaluation length ``length``; when they score fewer than
    ``min_scored_tokens``, a ConfigError naming ``field``, the length and the longest length that would."""
    anchors = window_anchors(doc_lengths, length, window, max_windows, seed)
    scored = len(anchors) * min(window, length)
    if scored < min_scored_tokens:
        fits = longest_length(doc_lengths, window, max_windows, min_scored_tokens, length)
        allowed = f"eval_lens ≤ {fits}" if fits else "no length of this corpus"
        raise ConfigError(
            f"{field}: {length} leaves only {len(anchors)} windows ({scored} scored tokens) in validation documents "
            f"of ≥ {length + 1} tokens (the longest has {int(max(doc_lengths, default=0))}), below min_scored_tokens "
            f"{min_scored_tokens}; allowed values: {allowed}, a smaller min_scored_tokens, or a corpus with longer "
            "documents")
    return anchors
