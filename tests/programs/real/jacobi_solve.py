"""A 2-D Poisson equation solved by Jacobi sweeps, as a numerical-methods course writes it
with PyTorch as its GPU numpy: no module, no function per sweep, the loop at the top of the
script. The residual is read back every ``--check-every`` sweeps (a host sync) and the solve
stops under ``--tol``; each solve starts from zero. RESULT's ``ms_per_step``: one sweep, the
time between the first and the last check of each solve over the sweeps between them.
"""

import argparse
import json
import statistics
import time

import torch

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--n", type=int, default=2048, help="grid points per side")
p.add_argument("--sweeps", type=int, default=2000, help="most sweeps a solve runs")
p.add_argument("--check-every", type=int, default=50)
p.add_argument("--tol", type=float, default=0.0)
p.add_argument("--solves", type=int, default=2)
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
args = p.parse_args()

h = 1.0 / (args.n - 1)
xs = torch.linspace(0, 1, args.n, device=args.device)
f = torch.sin(torch.pi * xs)[:, None] * torch.sin(torch.pi * xs)[None, :]
per_sweep = []
for solve in range(args.solves):
    u = torch.zeros(args.n, args.n, device=args.device)
    checks = []
    for sweep in range(1, args.sweeps + 1):
        u_new = u.clone()
        u_new[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] + h * h * f[1:-1, 1:-1])
        if sweep % args.check_every == 0:
            residual = (u_new - u).abs().max().item()
            checks.append(time.perf_counter())
            if residual < args.tol:
                u = u_new
                break
        u = u_new
    per_sweep.append((checks[-1] - checks[0]) * 1e3 / (args.check_every * (len(checks) - 1)))
    print(f"solve {solve}: {sweep} sweeps, residual {residual:.3e}, {per_sweep[-1]:.3f} ms per sweep")
print("RESULT " + json.dumps({"ms_per_step": statistics.median(per_sweep), "sweeps": sweep}))
