"""The torch-free facts and arithmetic the plan uses instead of building models: every encoding's facts equal its
module's, and the parameter and FLOP counts equal those of the built GPT and CHE encoder, for every encoding ×
processor; the workflow's plan is built without importing torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dape_core.encoding_facts import ENCODING_FACTS
from dape_core.encodings import ENCODINGS, build_encoding
from dape_core.model import GPT, Encoder, EncoderConfig, GPTConfig
from dape_core.model_arithmetic import decoder_non_embedding_parameters, gpt_flops_per_token, stack_parameters

REPO = Path(__file__).resolve().parents[1]
PROCESSORS = [("none", 1), ("dape_v1", 1), ("dape_v2", 3)]


def test_every_registered_encoding_has_its_facts_and_every_fact_an_encoding():
    assert tuple(ENCODINGS) == tuple(ENCODING_FACTS)


@pytest.mark.parametrize("encoding", tuple(ENCODING_FACTS))
@pytest.mark.parametrize("causal", [True, False])
def test_an_encodings_facts_are_its_modules(encoding, causal):
    module = build_encoding(encoding, 4, 16, causal=causal, train_len=64)
    facts = ENCODING_FACTS[encoding]
    assert (module.has_bias, module.randomized_positions, module.shared_by_default) == (
        facts.has_bias, facts.randomized_positions, facts.shared_by_default)
    assert facts.parameters(4, 16, causal) == sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("encoding", tuple(ENCODING_FACTS))
@pytest.mark.parametrize("processor,kernel_size", PROCESSORS)
def test_the_decoders_counted_parameters_are_the_built_models(encoding, processor, kernel_size):
    for shared in (None, True, False):
        cfg = GPTConfig(size="tiny", encoding=encoding, processor=processor, kernel_size=kernel_size,
                        encoding_shared=shared, dape_width=8, vocab_size=97, train_len=64)
        model = GPT(cfg)
        assert decoder_non_embedding_parameters(cfg) == model.non_embedding_parameters(), shared
    assert gpt_flops_per_token(cfg, 64) == model.flops_per_token(64)


@pytest.mark.parametrize("encoding", ["kerple", "cope", "xl", "t5"])
@pytest.mark.parametrize("processor,kernel_size", PROCESSORS)
def test_the_encoders_counted_stack_is_the_built_one(encoding, processor, kernel_size):
    cfg = EncoderConfig(encoding=encoding, processor=processor, kernel_size=kernel_size, n_layer=2, d_model=32,
                        n_head=4, input_vocab=3, output_vocab=2)
    model = Encoder(cfg)
    assert stack_parameters(cfg, causal=False) == sum(p.numel() for p in model.stack.parameters())


def test_a_paper_size_is_counted_without_building_it():
    cfg = GPTConfig(size="125M", encoding="kerple", processor="dape_v2", kernel_size=3, vocab_size=50304)
    # 12 blocks of 12·768² + 13·768 (+ LayerNorms), Kerple's 2·12 per layer, Conv1 24→32 and Conv2 32→12 of 1×3
    block = 12 * 768 * 768 + 13 * 768
    dape = (24 * 32 * 3 + 32) + (32 * 12 * 3 + 12)
    assert decoder_non_embedding_parameters(cfg) == 12 * (block + 2 * 12 + dape) + 2 * 768


def test_building_the_paper_plan_and_its_estimate_imports_no_torch():
    code = ("import sys; from dape_core import config as g; "
            "p = g.build_plan(g.load_yaml('configs/paper.yaml')); g.estimate_line(p); "
            "g.train_options(p.lm_runs[next(iter(p.lm_runs))]['settings']); "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
