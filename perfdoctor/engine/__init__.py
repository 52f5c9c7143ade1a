"""The bundled reference engine: Llama-3.2-1B greedy decode at batch 1.

The workload perfdoctor is proven on, small enough to read in one sitting:

- `config`   the model shapes (Llama-3.2-1B exactly, and a tiny twin for tests);
- `model`    the decoder with a static KV cache, fused QKV and gate/up matrices;
- `weights`  seeded random weights, or a local Hugging Face folder (safetensors);
- `generate` prefill + greedy decode, each step a `perfdoctor.region("decode_step")`
             declaring its token and bytes; the step itself is passed in;
- `variants` the decode steps by name: `eager`, `graph` (`graphs.GraphedStep`), `fused`
             (Triton kernels in `kernels/`, see `fused`), `fused-int8` (the same on int8
             weights, see `quant`), `megakernel` (the whole step as one persistent CUDA
             kernel, see `megakernel` and `cubin`);
- `measure`  ms/token, tokens/s, GB/s against the NVML peak;
- `hf`       transformers' LlamaForCausalLM on the same weights, the reference.

Run it with `python -m perfdoctor.engine --help`. Importing this package imports nothing
else (no torch).

May import: perfdoctor.api (its steps are regions) and collectors.nvml (the peak bandwidth);
nothing of the analysis: the engine is a program perfdoctor measures, like any user's.
"""
