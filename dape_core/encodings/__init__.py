"""Positional encodings: NoPE, RoPE, YaRN, randomized RoPE, T5 bias, ALiBi, Kerple (log), FIRE, CoPE and
Transformer-XL.

Every encoding works at any length (no maximum-length assertion, nothing cached by length) and offers the score
pipeline (``dape_core.attention``) two hooks, for 1-D positions ``q_pos``, ``k_pos`` and ``scores`` = q·kᵀ/√d:

* ``rotate(q, k, q_pos, k_pos)`` — a rotation of queries and keys (RoPE, YaRN, randomized RoPE); else the identity;
* ``bias(q, k, scores, q_pos, k_pos)`` — the additive bias B of paper eq. (1): ``None`` (NoPE, the RoPE family),
  ``[H, Tq, Tk]`` (ALiBi, Kerple, FIRE, T5) or ``[batch, H, Tq, Tk]`` when it depends on the query (CoPE, XL).

Decoder (causal) biases are the public code's, built on tril(i − j): keys right of the query see distance 0's bias
(the causal mask hides them; only a processor without tril, the §4.5 ablation, reads them). With ``causal=False``
(the CHE encoder) each encoding tells left from right as its docstring says. A new encoding: an entry in
``dape_core.encoding_facts`` and a class decorated with ``@register("name")`` in a module here (``base``, ``rotary``,
``additive``: biases of the distance alone, ``query_dependent``), imported below.

Parameter-free tensors constant within a forward pass (distances, T5's buckets, masks, XL's sinusoids, ALiBi's whole
bias) are built once per pair of position tensors and shared by every layer (``geometry``; under ``torch.compile``
inside the graph); anything depending on a parameter is recomputed at every call.
"""

# in the order the encodings register (the order of the `encoding` setting's allowed values)
from dape_core.encodings.base import (ENCODINGS, GeometryCache, NoPE, PositionalEncoding, build_encoding,  # isort: skip
                                      geometry, register, relative_distance)
from dape_core.encodings.rotary import RandomizedRoPE, RoPE, YaRN  # isort: skip
from dape_core.encodings.additive import FIRE, ALiBi, Kerple, T5Bias, alibi_slopes, t5_bucket  # isort: skip
from dape_core.encodings.query_dependent import CoPE, TransformerXL, sinusoid  # isort: skip

__all__ = [
    "ENCODINGS", "PositionalEncoding", "register", "build_encoding", "relative_distance", "GeometryCache", "geometry",
    "NoPE", "RoPE", "YaRN", "RandomizedRoPE", "ALiBi", "Kerple", "FIRE", "T5Bias", "CoPE", "TransformerXL",
    "alibi_slopes", "t5_bucket", "sinusoid",
]
