"""The paper's method labels, parsed and formatted in one place.

A label names an encoding and its processor as the paper does: "Kerple" (no processor), "DAPE-Kerple" (DAPE V1, the
MLP, kernel 1), "DAPE1x3-Kerple" (DAPE V2, 1×3 kernel), " (no tril)" for the §4.5 ablation. Configs' ``method`` axis,
reports and the paper's numbers all use them.
"""

from __future__ import annotations

import re

from dape_core.encoding_facts import ENCODING_FACTS, display_name
from dape_core.errors import ConfigError

NO_TRIL = " (no tril)"
_PATTERN = re.compile(r"^(?:dape(?:1[x×](?P<k>\d+))?-)?(?P<encoding>[a-z0-9]+)(?P<notril> \(no tril\))?$",
                      re.IGNORECASE)


def method_label(encoding: str, processor: str = "none", kernel_size: int = 1, tril: bool = True) -> str:
    """The paper's name of a method: "Kerple", "DAPE-Kerple" (V1), "DAPE1x3-Kerple" (V2, k = 3)."""
    name = _with_processor(display_name(encoding), processor, kernel_size)
    return name + (NO_TRIL if processor != "none" and not tril else "")


def _with_processor(name: str, processor: str, kernel_size: int) -> str:
    """``name`` with the processor's prefix: "DAPE-" (V1), "DAPE1x<k>-" (V2), none without a processor."""
    return {"dape_v1": f"DAPE-{name}", "dape_v2": f"DAPE1x{kernel_size}-{name}"}.get(processor, name)


def parse_method(label: str, field: str = "method") -> dict:
    """A label → ``encoding``, ``processor``, ``kernel_size`` and ``tril`` (the inverse of :func:`method_label`;
    encodings may be given by display name or registry name, case-insensitively)."""
    by_name = {facts.display.lower(): name for name, facts in ENCODING_FACTS.items()} | {e: e for e in ENCODING_FACTS}
    match = _PATTERN.match(str(label).strip())
    encoding = by_name.get(match.group("encoding").lower()) if match else None
    if encoding is None:
        raise ConfigError(f"{field}: {label!r} is not allowed; allowed values: "
                          f"{', '.join(f.display for f in ENCODING_FACTS.values())}, "
                          "DAPE-<encoding> (DAPE V1) or DAPE1x<k>-<encoding> (DAPE V2, k odd)")
    tril = match.group("notril") is None
    if not str(label).strip().lower().startswith("dape"):
        if not tril:
            raise ConfigError(f"{field}: {label!r} is not allowed; allowed values: ' (no tril)' only after a DAPE "
                              "label (tril acts on a processor's input)")
        return {"encoding": encoding, "processor": "none", "kernel_size": 1, "tril": True}
    if match.group("k") is None:
        return {"encoding": encoding, "processor": "dape_v1", "kernel_size": 1, "tril": tril}
    return {"encoding": encoding, "processor": "dape_v2", "kernel_size": int(match.group("k")), "tril": tril}


#: display names of the Hugging Face decoders that dape_core.hf patches (model_type → label)
HF_MODEL_NAMES = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2"}
BASE, FINETUNED = " (base)", " fine-tuned"


def hf_method_label(model_type: str, encoding: str = "nope", processor: str = "none", kernel_size: int = 1,
                    tril: bool = True, *, finetuned: bool) -> str:
    """A Hugging Face decoder's label in the same style: "Llama (base)" (a fresh configuration or the original
    checkpoint), "Llama fine-tuned", "DAPE1x3-Llama fine-tuned" (eq. 4: the processor on the model's RoPE scores),
    "DAPE-Llama+Kerple fine-tuned" (eq. 5 with an additive bias on top of RoPE)."""
    name = HF_MODEL_NAMES.get(model_type, str(model_type))
    if processor != "none" and encoding != "nope":
        name += f"+{display_name(encoding)}"
    name = _with_processor(name, processor, kernel_size) + (FINETUNED if finetuned else BASE)
    return name + (NO_TRIL if processor != "none" and not tril else "")


def method_slug(encoding: str, processor: str, kernel_size: int, dape_width: int) -> str:
    """``kerple-none`` or ``kerple-dape_v2-k3-w32``: the method part of a run name."""
    if processor == "none":
        return f"{encoding}-none"
    return f"{encoding}-{processor}-k{kernel_size}-w{dape_width}"
