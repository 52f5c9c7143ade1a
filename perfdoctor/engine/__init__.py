"""The bundled reference engine: Llama-3.2-1B greedy decode at batch 1.

The workload perfdoctor is proven on, small enough to read in one sitting:

- `config`   the model shapes (Llama-3.2-1B exactly, and a tiny twin for tests);
- `model`    the decoder with a static KV cache, fused QKV and gate/up matrices;
- `weights`  seeded random weights, or a local Hugging Face folder (safetensors);
- `generate` prefill + greedy decode; decode-step variants (`eager`, `graph`) by name;
- `ranges`   the `decode_step` range and the `perfdoctor.declare` declaration;
- `measure`  ms/token, tokens/s, GB/s against the NVML peak;
- `hf`       transformers' LlamaForCausalLM on the same weights, the reference.

Run it with `python -m perfdoctor.engine --help`. Only `ranges` is re-exported here, so
importing this package does not import torch.
"""

from perfdoctor.engine.ranges import declare_step, step_range

__all__ = ["declare_step", "step_range"]
