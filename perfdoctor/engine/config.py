"""Model shapes for the bundled engine: Llama-3.2-1B exactly, and a tiny twin for tests.

A config is plain data. It converts to and from the Hugging Face `config.json` layout so a
local checkpoint folder can be loaded and random weights can be saved as one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfdoctor.errors import UsageError


class BadInput(UsageError, ValueError):
    """User input the engine cannot use (unknown config, missing folder, context too short).

    The command line prints it as one line and exits with status 2.
    """


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3's frequency-dependent RoPE stretch (the `rope_type: llama3` of HF configs).

    Wavelengths longer than `original_max_position / low_freq_factor` are slowed by
    `factor`; shorter than `original_max_position / high_freq_factor` are kept; the band
    in between is blended linearly. This lets a model trained on 8K positions read 128K.
    """

    factor: float = 32.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192


@dataclass(frozen=True)
class ModelConfig:
    """Shapes of a Llama-architecture decoder."""

    name: str
    vocab_size: int
    hidden: int
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    rms_eps: float = 1e-5
    rope_theta: float = 500000.0
    rope_scaling: RopeScaling | None = RopeScaling()
    tied_embeddings: bool = True
    max_position: int = 131072

    def __post_init__(self) -> None:
        if self.q_heads % self.kv_heads:
            raise BadInput(f"q_heads {self.q_heads} is not a multiple of kv_heads {self.kv_heads}")
        if self.head_dim % 2:
            raise BadInput(f"head_dim {self.head_dim} must be even for RoPE")

    def param_count(self) -> int:
        """Parameters stored (the tied embedding counted once)."""
        attn = self.hidden * (self.q_heads + 2 * self.kv_heads) * self.head_dim
        attn += self.q_heads * self.head_dim * self.hidden
        mlp = 3 * self.hidden * self.intermediate
        per_layer = attn + mlp + 2 * self.hidden  # two RMSNorm weights
        embed = self.vocab_size * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * per_layer + embed + self.hidden  # + final norm

    def kv_bytes_per_position(self, itemsize: int) -> int:
        """Bytes of K and V that one cached position holds, over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * itemsize


LLAMA_3_2_1B = ModelConfig(
    name="llama-3.2-1b",
    vocab_size=128256,
    hidden=2048,
    layers=16,
    q_heads=32,
    kv_heads=8,
    head_dim=64,
    intermediate=8192,
)

# Same architecture, toy sizes. original_max_position is 16 so that positions a test
# reaches (tens) fall in every band of the llama3 RoPE scaling.
TINY = ModelConfig(
    name="tiny",
    vocab_size=256,
    hidden=64,
    layers=2,
    q_heads=4,
    kv_heads=2,
    head_dim=16,
    intermediate=128,
    rope_scaling=RopeScaling(original_max_position=16),
    max_position=2048,
)

CONFIGS: dict[str, ModelConfig] = {c.name: c for c in (LLAMA_3_2_1B, TINY)}


def named_config(name: str) -> ModelConfig:
    """Look up a built-in config by name."""
    if name not in CONFIGS:
        raise BadInput(f"unknown config {name!r}; choose one of {', '.join(CONFIGS)}")
    return CONFIGS[name]


def to_hf_dict(config: ModelConfig) -> dict[str, Any]:
    """The `config.json` a Hugging Face Llama checkpoint with these shapes would carry."""
    out: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden,
        "num_hidden_layers": config.layers,
        "num_attention_heads": config.q_heads,
        "num_key_value_heads": config.kv_heads,
        "head_dim": config.head_dim,
        "intermediate_size": config.intermediate,
        "hidden_act": "silu",
        "rms_norm_eps": config.rms_eps,
        "rope_theta": config.rope_theta,
        "rope_scaling": None,
        "tie_word_embeddings": config.tied_embeddings,
        "max_position_embeddings": config.max_position,
        "attention_bias": False,
        "mlp_bias": False,
    }
    if config.rope_scaling is not None:
        s = config.rope_scaling
        out["rope_scaling"] = {
            "rope_type": "llama3",
            "factor": s.factor,
            "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor,
            "original_max_position_embeddings": s.original_max_position,
        }
    return out


def from_hf_dict(hf: dict[str, Any], name: str = "hf") -> ModelConfig:
    """Read a Hugging Face Llama `config.json` (transformers 4.x or 5.x layout)."""
    if hf.get("model_type", "llama") != "llama":
        raise BadInput(f"config.json has model_type {hf.get('model_type')!r}; only 'llama' is supported")
    # transformers 5 writes `rope_parameters` (theta inside); 4.x wrote rope_theta + rope_scaling.
    rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    theta = rope.get("rope_theta", hf.get("rope_theta", 10000.0))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", "llama3"):
        raise BadInput(f"rope_type {rope_type!r} is not supported (only default and llama3)")
    scaling = None
    if rope_type == "llama3":
        scaling = RopeScaling(
            factor=float(rope["factor"]),
            low_freq_factor=float(rope["low_freq_factor"]),
            high_freq_factor=float(rope["high_freq_factor"]),
            original_max_position=int(rope["original_max_position_embeddings"]),
        )
    try:
        heads = int(hf["num_attention_heads"])
        return ModelConfig(
            name=name,
            vocab_size=int(hf["vocab_size"]),
            hidden=int(hf["hidden_size"]),
            layers=int(hf["num_hidden_layers"]),
            q_heads=heads,
            kv_heads=int(hf.get("num_key_value_heads", heads)),
            head_dim=int(hf.get("head_dim") or hf["hidden_size"] // heads),
            intermediate=int(hf["intermediate_size"]),
            rms_eps=float(hf.get("rms_norm_eps", 1e-5)),
            rope_theta=float(theta),
            rope_scaling=scaling,
            tied_embeddings=bool(hf.get("tie_word_embeddings", False)),
            max_position=int(hf.get("max_position_embeddings", 2048)),
        )
    except KeyError as e:
        raise BadInput(f"config.json lacks {e.args[0]!r}") from None

