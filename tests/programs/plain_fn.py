"""A CPU torch loop with no annotation at all: each call of decode() (here), of
plainlib.step_once (imported) or of plainpkg.ops.rescale (imported from its package) is a
step only when perfdoctor run --step-fn says so."""

import torch
from plainlib import step_once
from plainpkg import rescale


def decode(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ x)


x = torch.randn(64, 64)
for _ in range(5):
    x = decode(x)
    x = step_once(x)
    x = rescale(x)
