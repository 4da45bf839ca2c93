"""Converting a GGUF file in a log: our plain progress lines, none of transformers' tqdm bar, and
transformers' progress switches as they were. A tiny random Llama GGUF is written in the test."""

import io
import time

import numpy as np
import pytest

from models.gguf_progress import conversion_progress


def write_tiny_gguf(path, layers: int = 2, hidden: int = 16, heads: int = 2, ffn: int = 32) -> int:
    """A 2-layer Llama with a byte-level BPE vocabulary of 31 tokens, fp32 tensors; returns the tensor count."""
    gguf = pytest.importorskip("gguf")
    tokens = ["<s>", "</s>", "<pad>"] + [chr(c) for c in range(97, 123)] + ["Ġ", "ab"]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(64)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_block_count(layers)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3))
    writer.add_token_merges(["a b"])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    writer.add_pad_token_id(2)
    rng = np.random.default_rng(0)
    tensors = {"token_embd.weight": (len(tokens), hidden), "output_norm.weight": (hidden,),
               "output.weight": (len(tokens), hidden)}
    for i in range(layers):
        for name, shape in [("attn_q", (hidden, hidden)), ("attn_k", (hidden, hidden)), ("attn_v", (hidden, hidden)),
                            ("attn_output", (hidden, hidden)), ("ffn_gate", (ffn, hidden)), ("ffn_up", (ffn, hidden)),
                            ("ffn_down", (hidden, ffn)), ("attn_norm", (hidden,)), ("ffn_norm", (hidden,))]:
            tensors[f"blk.{i}.{name}.weight"] = shape
    for name, shape in tensors.items():
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.02 + (len(shape) == 1)).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return len(tensors)


def _switches():
    import huggingface_hub.utils as hub_utils
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    return gguf_utils.tqdm, hf_logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled()


def test_a_gguf_conversion_in_a_log_prints_plain_lines_and_no_tqdm_bar(tmp_path, monkeypatch, capsys):
    from models.loading import resolve_model_dir

    count = write_tiny_gguf(tmp_path / "tiny.gguf")
    monkeypatch.setenv("DOSSIER_CACHE", str(tmp_path / "cache"))
    before = _switches()
    folder = resolve_model_dir(tmp_path / "tiny.gguf")  # stderr is pytest's capture: not a terminal
    err = capsys.readouterr().err
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    assert "Converting and de-quantizing" not in err and "\r" not in err  # transformers' bar wrote nothing
    for phase in ("reading the config", "dequantising tensors", "reading the tokenizer", "writing safetensors"):
        assert f"converting tiny.gguf: {phase}" in err, err
    assert _switches() == before  # the caller's bars work as before
    assert count == 21


def test_plain_lines_count_the_tensors_and_a_terminal_keeps_the_bar():
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    before = _switches()
    log = io.StringIO()
    with conversion_progress("m.gguf", stream=log, every=0.01) as say:
        assert list(gguf_utils.tqdm(range(40), desc="Converting and de-quantizing GGUF tensors...")) == list(range(40))
        for _ in range(200):  # the timer prints the finished count within a tick or two
            if "dequantising tensors 40/40" in log.getvalue():
                break
            time.sleep(0.01)
        say("writing safetensors")
    assert "converting m.gguf: dequantising tensors 40/40, elapsed 0s" in log.getvalue()
    assert "converting m.gguf: writing safetensors, elapsed" in log.getvalue()  # a new phase drops the count
    assert _switches() == before

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    with conversion_progress("m.gguf", stream=screen):
        assert _switches() == before  # on a terminal transformers' own bar is the progress
    assert screen.getvalue() == ""


def test_the_switches_come_back_when_the_conversion_fails():
    before = _switches()
    with pytest.raises(RuntimeError, match="bad tensor"):
        with conversion_progress("m.gguf", stream=io.StringIO()):
            raise RuntimeError("bad tensor")
    assert _switches() == before
