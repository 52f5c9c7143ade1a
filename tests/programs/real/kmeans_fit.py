"""k-means clustering on the GPU as kmeans_pytorch (and the notebooks that copy it) write it.

No module, no optimizer, no data loader: tensors and a ``while True`` loop. Per iteration,
``pairwise_distance`` (a function of this file), the argmin, then the new centres: with
``--style per-cluster`` (kmeans_pytorch's) a Python loop over the clusters, each
``torch.nonzero(choice == index)`` a host sync; with ``--style scatter`` one ``index_add_``
for all of them. The loop ends when the centres' shift is under ``--tol`` (a host sync each
iteration) or after ``--iters``. Each fit is timed per iteration by its own timer; RESULT's
``ms_per_step`` is their median after the first ``--warmup`` iterations of each fit.
"""

import argparse
import json
import statistics
import time

import torch


def pairwise_distance(data1, data2):
    a = data1.unsqueeze(dim=1)  # N x 1 x M
    b = data2.unsqueeze(dim=0)  # 1 x K x M
    return ((a - b) ** 2.0).sum(dim=-1)  # N x K


def initialize(x, num_clusters, generator):
    indices = torch.randperm(x.shape[0], generator=generator)[:num_clusters]
    return x[indices.to(x.device)].clone()


def kmeans(x, num_clusters, style, tol, iters, generator):
    state = initialize(x, num_clusters, generator)
    times = []
    iteration = 0
    while True:
        t0 = time.perf_counter()
        dis = pairwise_distance(x, state)
        choice_cluster = torch.argmin(dis, dim=1)
        state_pre = state.clone()
        if style == "per-cluster":
            for index in range(num_clusters):
                selected = torch.nonzero(choice_cluster == index).squeeze()
                selected = torch.index_select(x, 0, selected)
                if selected.shape[0] == 0:  # an empty cluster keeps its centre
                    continue
                state[index] = selected.mean(dim=0)
        else:
            sums = torch.zeros_like(state).index_add_(0, choice_cluster, x)
            counts = torch.bincount(choice_cluster, minlength=num_clusters).unsqueeze(1)
            state = torch.where(counts > 0, sums / counts.clamp(min=1), state)
        center_shift = torch.sum(torch.sqrt(torch.sum((state - state_pre) ** 2, dim=1)))
        iteration += 1
        shift = center_shift.item() ** 2  # a host sync: the iteration's work is done
        times.append((time.perf_counter() - t0) * 1e3)
        if shift < tol or iteration >= iters:
            return state, times


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--points", type=int, default=200_000)
    p.add_argument("--dims", type=int, default=64)
    p.add_argument("--clusters", type=int, default=32)
    p.add_argument("--style", choices=["per-cluster", "scatter"], default="per-cluster")
    p.add_argument("--iters", type=int, default=40, help="most iterations a fit runs")
    p.add_argument("--tol", type=float, default=0.0, help="stop when the centres moved less (0: run --iters)")
    p.add_argument("--fits", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2, help="iterations of each fit left out of the median")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    device = torch.device(args.device)
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(args.clusters, args.dims, generator=g) * 4
    labels = torch.randint(0, args.clusters, (args.points,), generator=g)
    x = (centres[labels] + torch.randn(args.points, args.dims, generator=g)).to(device)
    kept, iterations = [], []
    for fit in range(args.fits):
        _, times = kmeans(x, args.clusters, args.style, args.tol, args.iters, g)
        kept += times[args.warmup:]
        iterations.append(len(times))
        print(f"fit {fit}: {len(times)} iterations, {statistics.median(times):.2f} ms each")
    print("RESULT " + json.dumps({"ms_per_step": statistics.median(kept), "iterations": iterations,
                                  "style": args.style}))


if __name__ == "__main__":
    main()
