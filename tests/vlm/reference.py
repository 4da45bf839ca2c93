"""The HF reference for the engine's VLM parity tests: full recompute of a whole conversation."""

import torch


def hf_inputs(session, vision) -> dict:
    """The HF model's inputs for a session's whole history: ids, every image's pixels and grid, token types."""
    ids = torch.tensor([session.token_ids])
    types = torch.zeros_like(ids, dtype=torch.int32)
    items = [item for _, item in session.seq.mm_items]
    for start, item in session.seq.mm_items:
        types[0, start : start + item.length] = 1
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "mm_token_type_ids": types}
    if vision.sizing.fixed:  # Gemma-3: token types drive its bidirectional image mask; images come whole
        inputs["token_type_ids"] = inputs.pop("mm_token_type_ids")
    if items:
        pixel_values, grid = vision.pixel_values([item.data for item in items])
        inputs.update(pixel_values=pixel_values)
        if vision.sizing.rule == "gemma4":  # padded patches and their (x, y) positions
            inputs.update(image_position_ids=grid)
        elif not vision.sizing.fixed:
            inputs.update(image_grid_thw=grid)
    return inputs


@torch.inference_mode()
def hf_greedy(model, inputs: dict, max_new_tokens: int) -> list[int]:
    model.model.rope_deltas = None  # the HF model keeps per-conversation state on the object; start clean
    out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=None)
    return out[0, inputs["input_ids"].shape[1] :].tolist()


@torch.inference_mode()
def hf_logits(model, inputs: dict) -> torch.Tensor:
    """Logits (tokens, vocab) of one full forward (no cache)."""
    model.model.rope_deltas = None
    return model(**inputs).logits[0].float()


class LogitSpy:
    """Records the logits rows the engine samples from, per session, in order (wraps runner.run); of a chunk with
    draft tokens, the rows a greedy reply keeps (engine/core/llm_engine.py's _verify)."""

    def __init__(self, engine) -> None:
        self.rows: dict[int, list[torch.Tensor]] = {}
        run = engine.runner.run

        def spied(chunks):
            logits = run(chunks)
            row = 0
            for chunk in [c for c in chunks if c.samples]:
                kept = self.rows.setdefault(chunk.request.seq.seq_id, [])
                for j in range(chunk.drafts + 1):  # a drafted chunk's rows count up to the first wrong guess
                    kept.append(logits[row + j].clone())
                    if j == chunk.drafts or int(logits[row + j].argmax()) != chunk.guesses[j]:
                        break
                row += 1 + chunk.drafts
            return logits

        engine.runner.run = spied
