"""Training as Dive into Deep Learning (d2l.ai) writes it, chapter 3/4's ``train_ch3``: no
``torch.optim``, its own minibatch ``sgd`` (``param -= lr * param.grad / batch_size`` under
``torch.no_grad()``, then ``param.grad.zero_()``), per epoch ``train_epoch_ch3`` over the
training DataLoader (an ``Accumulator`` of the loss sum, correct predictions and count, each
``float(...)`` a host read) and then ``evaluate_accuracy`` over the test DataLoader under
``torch.no_grad()``. ``--model scratch`` (3.6, 4.2: the network a Python function of
tensors that require grad, no ``nn.Module``) or ``module`` (an ``nn.Sequential`` with the
same ``sgd`` updater over its parameters, as Keras' torch backend steps its own optimizer).
Synthetic Fashion-MNIST-shaped data (28x28, 10 classes). Each training batch timed from the
previous one's end, its fetch included (RESULT's ``ms_each``, ``ms_per_step`` their median
after ``--warmup``).
"""

import argparse
import json
import statistics
import time

import torch
from torch import nn
from torch.utils import data


class Accumulator:
    """For accumulating sums over n variables (d2l)."""

    def __init__(self, n):
        self.data = [0.0] * n

    def add(self, *args):
        self.data = [a + float(b) for a, b in zip(self.data, args)]

    def __getitem__(self, idx):
        return self.data[idx]


def accuracy(y_hat, y):
    if len(y_hat.shape) > 1 and y_hat.shape[1] > 1:
        y_hat = y_hat.argmax(axis=1)
    cmp = y_hat.type(y.dtype) == y
    return float(cmp.type(y.dtype).sum())


def evaluate_accuracy(net, data_iter, device):
    if isinstance(net, nn.Module):
        net.eval()
    metric = Accumulator(2)
    with torch.no_grad():
        for X, y in data_iter:
            X, y = X.to(device), y.to(device)
            metric.add(accuracy(net(X), y), y.numel())
    return metric[0] / metric[1]


def sgd(params, lr, batch_size):
    """Minibatch stochastic gradient descent (d2l)."""
    with torch.no_grad():
        for param in params:
            param -= lr * param.grad / batch_size
            param.grad.zero_()


def train_epoch_ch3(net, train_iter, loss, updater, device, times):
    if isinstance(net, nn.Module):
        net.train()
    metric = Accumulator(3)
    t0 = time.perf_counter()
    for X, y in train_iter:
        X, y = X.to(device), y.to(device)
        y_hat = net(X)
        l = loss(y_hat, y)
        l.sum().backward()
        updater(X.shape[0])
        metric.add(float(l.sum()), accuracy(y_hat, y), y.numel())
        t1 = time.perf_counter()  # float() above read the loss: the batch's work is done
        times.append((t1 - t0) * 1e3)
        t0 = t1
    return metric[0] / metric[2], metric[1] / metric[2]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["scratch", "module"], default="scratch")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--train", type=int, default=12800, help="training examples")
    p.add_argument("--test", type=int, default=2560, help="test examples")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--workers", type=int, default=0, help="DataLoader num_workers (d2l: 4)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    device = torch.device(args.device)
    g = torch.Generator().manual_seed(0)
    make = lambda n: data.TensorDataset(torch.rand(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g))
    train_iter = data.DataLoader(make(args.train), args.batch_size, shuffle=True, num_workers=args.workers)
    test_iter = data.DataLoader(make(args.test), args.batch_size, shuffle=False, num_workers=args.workers)
    if args.model == "scratch":
        W1 = nn.Parameter(torch.randn(784, args.hidden, device=device) * 0.01)
        b1 = nn.Parameter(torch.zeros(args.hidden, device=device))
        W2 = nn.Parameter(torch.randn(args.hidden, 10, device=device) * 0.01)
        b2 = nn.Parameter(torch.zeros(10, device=device))
        params = [W1, b1, W2, b2]

        def net(X):
            X = X.reshape((-1, 784))
            H = torch.relu(X @ W1 + b1)
            return H @ W2 + b2
    else:
        net = nn.Sequential(nn.Flatten(), nn.Linear(784, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)).to(device)
        params = list(net.parameters())
    loss = nn.CrossEntropyLoss(reduction="none")
    updater = lambda batch_size: sgd(params, args.lr, batch_size)
    times = []
    for epoch in range(args.epochs):
        train_loss, train_acc = train_epoch_ch3(net, train_iter, loss, updater, device, times)
        test_acc = evaluate_accuracy(net, test_iter, device)
        print(f"epoch {epoch + 1}, loss {train_loss:.3f}, train acc {train_acc:.3f}, test acc {test_acc:.3f}")
    kept = times[args.warmup:]
    print("RESULT " + json.dumps({"ms_per_step": statistics.median(kept), "ms_each": times, "batches": len(times),
                                  "test_batches": args.epochs * len(test_iter)}))


if __name__ == "__main__":
    main()
