"""Where the engine's weights come from: seeded random tensors, or a local HF folder.

Weights travel as a Hugging Face-named state dict (`model.layers.0.self_attn.q_proj.weight`
...), the interchange format; `Transformer.from_hf_state_dict` fuses them for the engine.
Nothing is downloaded: without a folder the weights are random but realistically scaled,
which is all a bandwidth- and launch-bound decode benchmark needs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from perfdoctor.engine.config import BadInput, ModelConfig, from_hf_dict, named_config, to_hf_dict
from perfdoctor.engine.model import hf_parameter_shapes
from perfdoctor.io import write_json

def random_hf_state_dict(
    config: ModelConfig, seed: int, device: torch.device | str, dtype: torch.dtype
) -> dict[str, Tensor]:
    """Deterministic weights: N(0, 1/hidden) matrices, RMSNorm weights 1.

    A standard deviation of hidden^-1/2 (0.022 at Llama-3.2-1B's 2048, close to its
    trained weights) keeps each layer's contribution comparable to the embedding at any
    width, so even the tiny config generates varied tokens instead of echoing its input.

    Drawn on `device` from one generator seeded with `seed`, in a fixed order, so a seed
    names the same weights on every run (CPU and CUDA generators give different numbers).
    """
    gen = torch.Generator(device=device).manual_seed(seed)
    std = config.hidden**-0.5
    out = {}
    for name, shape in hf_parameter_shapes(config).items():
        if len(shape) == 1:
            out[name] = torch.ones(shape, device=device, dtype=dtype)
        else:
            out[name] = torch.randn(shape, generator=gen, device=device, dtype=dtype) * std
    return out


def load_hf_folder(
    folder: str | Path, device: torch.device | str, dtype: torch.dtype
) -> tuple[ModelConfig, dict[str, Tensor]]:
    """Read `config.json` and every `*.safetensors` of a Hugging Face Llama checkpoint."""
    from safetensors.torch import load_file

    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise BadInput(f"{folder} has no config.json")
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise BadInput(f"{folder} has no *.safetensors files")
    config = from_hf_dict(json.loads(config_path.read_text()), name=folder.name)
    wanted = hf_parameter_shapes(config)
    state: dict[str, Tensor] = {}
    for f in files:
        for name, tensor in load_file(f, device=str(device)).items():
            if name in wanted:  # skip extras such as a saved rotary inv_freq
                state[name] = tensor.to(dtype)
    return config, state


def save_hf_folder(folder: str | Path, config: ModelConfig, state: dict[str, Tensor]) -> None:
    """Write `config.json` + `model.safetensors` in the layout `load_hf_folder` (and HF) read."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "config.json", to_hf_dict(config))
    tensors = {name: state[name].contiguous() for name in hf_parameter_shapes(config)}
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def model_weights(
    config_name: str, folder: str | Path | None, seed: int, device: torch.device | str, dtype: torch.dtype
) -> tuple[ModelConfig, dict[str, Tensor]]:
    """The folder's config and weights when a folder is given, else a named config's random ones."""
    if folder is not None:
        return load_hf_folder(folder, device, dtype)
    config = named_config(config_name)
    return config, random_hf_state_dict(config, seed, device, dtype)


def load_tokenizer(folder: str | Path | None) -> Any | None:
    """The folder's `tokenizer.json` as a `tokenizers.Tokenizer`, or None (use token ids)."""
    if folder is None or not (Path(folder) / "tokenizer.json").is_file():
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    return Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
