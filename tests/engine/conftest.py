"""Tiny random text models of the registered families and a tokenizer trained in the test, saved as HF directories.

The tokenizer is a byte-level BPE with SmolLM2's special tokens and ChatML template, so
chat rendering behaves like the real default model's. Weights are random but with a
large initializer range, so greedy choices are far from ties and parity with HF
`generate` is a real check rather than luck.
"""

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"]
CORPUS = [
    "The quarterly report lists revenue, operating income and net profit for each segment.",
    "Search results: page 3 of annual-report.pdf mentions total revenue of $1,577 million in 2019.",
    '{"name": "search", "arguments": {"query": "revenue 2019"}}',
    "You are a document agent. Use the tools search, view_page and answer to answer the question.",
    "What is the capital of France? Paris is the capital and largest city of France.",
    "Tables, figures and footnotes appear on pages 12 to 19 of the filing.",
] * 4


def build_tokenizer(vocab_size: int = 400):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator(CORPUS, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|im_end|>", bos_token="<|im_start|>", pad_token="<pad>",
        unk_token="<|endoftext|>",
    )
    tokenizer.chat_template = SMOLLM2_TEMPLATE
    return tokenizer


# The common sizes of tiny text models; each family adds its own switches (FamilySpec.tiny).
TINY = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=4096, initializer_range=0.25, eos_token_id=2, bos_token_id=1, pad_token_id=3,
)


def build_model(family: str = "llama", vocab_size: int = 448, seed: int = 0):
    """The HF reference model of a registered text family, tiny and randomly initialised."""
    from models.registry import family_named

    spec = family_named(family)
    config = spec.config(**{**TINY, "vocab_size": vocab_size, **spec.tiny})
    torch.manual_seed(seed)
    return spec.reference()(config).eval()


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


def _save(tmp_path_factory, tokenizer, kind: str):
    folder = tmp_path_factory.mktemp(f"tiny-{kind}")
    model = build_model(kind)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory, tokenizer):
    """(model directory, the HF reference model) of a 2-layer random Llama with the test tokenizer."""
    return _save(tmp_path_factory, tokenizer, "llama")


@pytest.fixture(scope="session")
def tiny_qwen2(tmp_path_factory, tokenizer):
    return _save(tmp_path_factory, tokenizer, "qwen2")


def hf_greedy(model, prompt: list[int], max_new_tokens: int, eos: list[int] | None) -> list[int]:
    """HF `generate`'s greedy continuation of one prompt (no padding, explicit attention mask)."""
    ids = torch.tensor([prompt])
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False,
        eos_token_id=eos, pad_token_id=3,
    )
    generated = out[0, len(prompt):].tolist()
    if eos:  # HF pads finished rows; cut after the first stop token
        for i, token in enumerate(generated):
            if token in eos:
                return generated[: i + 1]
    return generated


def random_prompt(length: int, seed: int, vocab: int = 448, low: int = 4) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(low, vocab, (length,), generator=generator).tolist()


def submit_together(engine, prompts: list[list[int]], max_new_tokens: int = 6) -> list:
    """Each prompt in its own session, all submitted together (greedy, `max_new_tokens` each), run until idle; the
    requests."""
    from engine import SamplingParams

    requests = []
    for prompt in prompts:
        session = engine.open_session()
        session.append(prompt)
        requests.append(engine.submit(session, SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True)))
    engine.run_until_idle()
    return requests


def run_all(engine, prompts: list[list[int]], new: int) -> list[list[int]]:
    """`submit_together`'s outputs."""
    return [list(r.output_token_ids) for r in submit_together(engine, prompts, new)]


def native_bf16() -> bool:
    """True on a CPU with native bf16 (avx512_bf16 or AMX), where the engine runs bf16 for real."""
    capabilities = torch.cpu.get_capabilities() if hasattr(torch.cpu, "get_capabilities") else {}
    return bool(capabilities.get("avx512_bf16") or capabilities.get("amx_bf16"))


NO_BF16 = pytest.mark.skipif(not native_bf16(), reason="this CPU has no native bf16 (avx512_bf16/AMX): bf16 "
                                                        "would be emulated, and the engine does not run it there")


# ours may be at most this much farther from float32 than transformers' own bf16 model (see bf16_session_check)
BF16_MEAN_VS_HF = 1.25


def bf16_session_check(engine, fresh, hf) -> None:
    """Three bf16 turns of one session, each continued from what the engine kept (only the new tokens prefilled):
    each turn's greedy tokens equal `fresh` (an engine without prefix caching) prefilling the whole history, and
    every sampled logits row is as close to transformers' float32 model as transformers' own bf16 model is.

    transformers' bf16 model is the yardstick, not the reference: its rounding is the larger. Measured on Qwen3.5
    (AMD EPYC with avx512_bf16, 2026-12-06; 3 turns, 24 rows): mean |Δlogit| to the float32 full forward 0.096
    ours, 0.104 transformers' bf16 full forward, whose bf16 `generate` took another token in turn 3 (a float32
    top-2 gap of 0.05) and drifted by up to 9.5 from there."""
    import copy

    from engine import SamplingParams
    from tests.vlm.reference import LogitSpy

    assert engine.adapter.dtype == torch.bfloat16
    spy = LogitSpy(engine)
    session, rows = engine.open_session(), []
    for turn in range(3):
        session.append(random_prompt(9 + 4 * turn, seed=300 + turn))
        history = session.token_ids
        rows += [len(history) - 1 + j for j in range(8)]
        reply = session.generate(SamplingParams(max_new_tokens=8, ignore_eos=True))
        if turn:
            assert reply.counters.tokens_cached == reply.history_tokens - 1, "the history was recomputed"
        alone = fresh.open_session()
        alone.append(history)
        assert reply.output_token_ids == alone.generate(SamplingParams(max_new_tokens=8, ignore_eos=True)).output_token_ids
        alone.close()
    ours = torch.stack(spy.rows[session.seq.seq_id]).float()
    with torch.inference_mode():
        tokens = torch.tensor([session.token_ids])
        float32 = hf(tokens).logits[0, rows].float()
        hf_bf16 = copy.deepcopy(hf).to(torch.bfloat16)(tokens).logits[0, rows].float()
    ours_error, hf_error = (ours - float32).abs().mean(), (hf_bf16 - float32).abs().mean()
    assert ours_error <= BF16_MEAN_VS_HF * hf_error, f"mean |Δ| to float32: ours {ours_error:.4f}, HF bf16 {hf_error:.4f}"


def outputs_at_chunk_sizes(engine_for, folder, prompt: list[int], chunks=(64, 7), check=None) -> list[list[int]]:
    """Greedy tokens of one prompt in the deterministic mode at each prefill chunk size (one thread); `check(engine,
    session)` runs after each."""
    from engine import SamplingParams

    outputs = []
    for chunk in chunks:
        engine = engine_for(folder, deterministic=True, max_num_batched_tokens=chunk, cpu_threads=1)
        session = engine.open_session()
        session.append(prompt)
        outputs.append(session.generate(SamplingParams(max_new_tokens=8, ignore_eos=True)).output_token_ids)
        if check is not None:
            check(engine, session)
    return outputs
