"""Hugging Face transformers' `LlamaForCausalLM` with the engine's config and weights.

The reference the engine is checked against, and a peer in the benchmark. transformers
is imported only when called: it is a test/bench extra, not an engine dependency.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from perfdoctor.engine.config import ModelConfig, to_hf_dict


def hf_model(config: ModelConfig, state: dict[str, Tensor], device: torch.device | str, dtype: torch.dtype) -> Any:
    """An eval-mode `LlamaForCausalLM` holding copies of the HF-named `state`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    hf_config = LlamaConfig.from_dict(to_hf_dict(config))
    # Build directly in `dtype`, as from_pretrained does: `.to(dtype)` afterwards would also
    # round the float32 RoPE frequencies HF keeps as a buffer.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(hf_config)
    finally:
        torch.set_default_dtype(previous)
    missing, unexpected = model.load_state_dict(state, strict=False)
    # A tied lm_head.weight is the embedding itself, so it is absent from `state`.
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"state does not fit LlamaForCausalLM: missing {missing}, unexpected {unexpected}")
    if config.tied_embeddings and model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        raise RuntimeError("transformers did not tie lm_head to the embedding")
    return model.eval()


def hf_greedy(model: Any, prompt: Tensor, n_tokens: int) -> list[int]:
    """`generate`'s greedy continuation of `prompt` [P]: exactly `n_tokens` new ids."""
    ids = prompt[None, :].to(model.device)
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=n_tokens,
            min_new_tokens=n_tokens,  # random weights know no end-of-text token
            pad_token_id=0,
        )
    return out[0, prompt.shape[0] :].tolist()
