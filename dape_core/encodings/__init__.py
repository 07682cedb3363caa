"""Positional encodings: NoPE, RoPE, YaRN, randomized RoPE, T5 bias, ALiBi, Kerple (log), FIRE, CoPE and
Transformer-XL.

Every encoding works at any length (no maximum-length assertion, nothing cached by length) and offers two
hooks that the score pipeline (``dape_core.attention``) calls:

* ``rotate(q, k, q_pos, k_pos)`` — a rotation of queries and keys (RoPE, YaRN, randomized RoPE); identity for
  the others;
* ``bias(q, k, scores, q_pos, k_pos)`` — the additive bias B of paper eq. (1): ``None`` (NoPE, the RoPE family),
  ``[H, Tq, Tk]`` (ALiBi, Kerple, FIRE, T5) or ``[batch, H, Tq, Tk]`` when it depends on the query (CoPE, XL).

``q_pos``/``k_pos`` are 1-D position vectors; ``scores`` is q·kᵀ/√d of the same rows. Decoder (causal) biases
are those of the public code, built on tril(i − j): keys right of the query see the bias of distance 0 (the
causal mask hides them; only a processor without tril, the §4.5 ablation, reads them). With ``causal=False``
(the CHE encoder) each encoding tells left from right; the choice per encoding is written in its docstring.
An encoding with ``randomized_positions`` is trained and evaluated at sorted random positions drawn by
``dape_core.positions``. A new encoding is one entry in ``dape_core.encoding_facts`` and one class decorated with
``@register("name")`` in a module of this package (``base``: the registry, the base class and NoPE; ``rotary``;
``additive``: biases of the distance alone; ``query_dependent``: CoPE and XL) imported here; it then joins the
tests and configs by name.

What does not change within a forward pass and has no parameters — distances, T5's buckets, masks, XL's
sinusoids, ALiBi's whole bias — is built once per pair of position tensors and reused by every layer
(``geometry``; under ``torch.compile`` built inside the graph, which shares it); anything that depends on a parameter
is recomputed at every call, so it follows its parameters.
"""

# in the order the encodings register (the order of the `encoding` setting's allowed values)
from dape_core.encodings.base import (ENCODINGS, GeometryCache, NoPE, PositionalEncoding, build_encoding,  # isort: skip
                                      geometry, register, relative_distance)
from dape_core.encodings.rotary import RandomizedRoPE, RoPE, YaRN  # isort: skip
from dape_core.encodings.additive import FIRE, ALiBi, Kerple, T5Bias, alibi_slopes, t5_bucket  # isort: skip
from dape_core.encodings.query_dependent import CoPE, TransformerXL, sinusoid  # isort: skip
from dape_core.encoding_facts import display_name  # isort: skip

__all__ = [
    "ENCODINGS", "PositionalEncoding", "register", "build_encoding", "relative_distance", "GeometryCache", "geometry",
    "NoPE", "RoPE", "YaRN", "RandomizedRoPE", "ALiBi", "Kerple", "FIRE", "T5Bias", "CoPE", "TransformerXL",
    "alibi_slopes", "t5_bucket", "sinusoid", "display_name",
]
