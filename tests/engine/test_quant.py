"""The int8 quantiser of the `fused-int8` variant: the round trip stays within half a step."""

from __future__ import annotations

import pytest
import torch

from perfdoctor.engine.quant import quantize_int8


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_round_trip_error_is_at_most_half_a_step(dtype):
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(64, 200, generator=gen) * torch.logspace(-3, 1, 64)[:, None]  # rows of every scale
    w[5, 17] = 40.0  # an outlier widens its own row's step only
    w[9] = 0.0
    w = w.to(dtype)
    q = quantize_int8(w)
    assert q.q.dtype == torch.int8 and q.scale.dtype == torch.float32 and q.scale.shape == (64,)
    assert q.q.abs().max() <= 127
    # Each non-zero row's largest |w| lands on +-127: the full range is used.
    assert (q.q.abs().amax(dim=1) == 127).sum() == 63 and not q.q[9].any()
    err = (q.dequantized(torch.float32) - w.float()).abs()
    # Half a step, plus fp32 rounding of w / scale and of q * scale (|q| <= 127 < 2^7).
    assert (err <= q.scale[:, None] * (0.5 + 2**-16)).all()
    assert err[4].max() < err[5].max() / 100, "the outlier's step leaked into another row"
    # Gaussian-like rows: about 0.8 % RMS error relative to the row's spread (quant's docstring).
    rows = torch.randn(256, 2048, generator=gen)
    rel = (quantize_int8(rows).dequantized(torch.float32) - rows).pow(2).mean().sqrt()
    assert 0.005 < rel < 0.012


def test_requantising_dequantised_weights():
    """The end-to-end test feeds eager and `fused-int8` the dequantised weights, which the
    step quantises again. In fp32 (the CPU test) it lands on the same integers, so both
    apply one matrix; dequantised to bf16 (2^-8 relative rounding, up to 127 steps) an
    integer may move by one, noise of bf16's own size."""
    w = torch.randn(48, 96, generator=torch.Generator().manual_seed(1))
    q = quantize_int8(w)
    again = quantize_int8(q.dequantized(torch.float32))
    assert torch.equal(again.q, q.q)
    torch.testing.assert_close(again.scale, q.scale, rtol=2**-22, atol=0)
    again = quantize_int8(q.dequantized(torch.bfloat16))
    assert (again.q.int() - q.q.int()).abs().max() <= 1
