"""Triton kernels for batch-1 Llama decode: one file per fused operation.

A decode step at batch 1 is a chain of matrix-vector products. Each weight byte is read
once and used for two FLOPs, so the step is bound by DRAM bandwidth and by the number of
kernels (each costs a launch gap and a ramp-up/tail). These kernels therefore fuse every
cheap element-wise operation into the matrix-vector product next to it, so a Llama layer
is five kernels:

    norm_qkv_rope      RMSNorm -> QKV GEMV -> RoPE -> K/V cache append (+ embedding gather)
    decode_attention   split-KV attention over the cache, GQA, in-kernel combine
    gemv_residual      O projection + residual add (and, again, down projection + residual)
    norm_gate_up       RMSNorm -> gate and up GEMV -> SiLU(gate) * up
    gemv_residual      down projection + residual add

and the step ends with `norm_lm_head_argmax` (final RMSNorm -> LM head -> argmax). All
read the position from device memory, so the whole step can be captured once in a CUDA
graph and replayed at every position (see `perfdoctor.engine.fused`).

`megakernel.cu` (CUDA C++, not Triton: it needs Hopper bulk copies into shared memory,
which Triton does not expose to a persistent kernel) runs the same operations, with the
same rounding, as one persistent kernel per step (see `perfdoctor.engine.megakernel`).

The four weight-reading kernels also take int8 weights with one fp32 scale per row (the
`fused-int8` variant, `perfdoctor.engine.quant`): the integers are converted in registers
(`_common.weights_f32`) and accumulated as they are, and each row's sum is multiplied by
its scale (`_common.row_sums`). Without a scale the code is the bf16 kernels' unchanged.

Each module imports triton at import time; import them only where triton is available
(`perfdoctor.engine` itself never imports this package eagerly).

Rounding: activations are rounded to the activation dtype (bf16 on GPU) at the same
points as the eager PyTorch model rounds them (after each projection, after the norm,
after SiLU, after each residual add), with fp32 arithmetic in between, so that greedy
tokens follow the eager engine for as long as possible.
"""
