"""Derivative throughput of common.autodiff against the naive nested ``torch.autograd.grad`` loop.

A 4x64 tanh MLP (``common.nn.MLP``) on 10,000 points in 2D and 3D, float32. For each
case both methods run in the same process, interleaved, best of several repeats:

* Laplacian: ``ad.laplacian(model(x), x)`` (gradient once, reused: 1 + d reverse
  passes) and ``ad.forward_laplacian(model, x)`` (one forward pass carrying the
  Jacobian and Laplacian) against the naive loop that, per dimension i, takes the
  gradient and then its i-th component's gradient (2 d passes).
* The same followed by ``backward()`` of a mean-square loss to the parameters
  (one PINN training step's derivative work).
* 4th order: ``ad.derivative(u, x, wrt)`` (reverse over reverse, the same passes as
  the naive loop: expect a ratio near 1) and ``ad.forward_derivative(model, x, wrt)``
  (forward Taylor mode) for ``wrt = (0, 0, 0, 0)`` and the mixed ``(0, 0, 1, 1)``,
  against four nested ``autograd.grad`` calls.

Every pair is checked to agree before it is timed. Ratios are naive time / ours
(above 1 means ours is faster); the ratio line comes last.

Usage::

    .venv/bin/python benchmarks/autodiff.py [--quick] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import torch

from common import autodiff as ad
from common.nn import MLP


def naive_laplacian(model, points):
    """Per dimension: gradient, then the gradient of its i-th component (2 d reverse passes)."""
    x = points.clone().requires_grad_()
    u = model(x)
    total = 0
    for index in range(x.shape[1]):
        first = torch.autograd.grad(u, x, torch.ones_like(u), create_graph=True)[0][:, index]
        total = total + torch.autograd.grad(first, x, torch.ones_like(first), create_graph=True)[0][:, index]
    return total


def naive_derivative(model, points, wrt):
    """Nested autograd.grad, one full gradient per index in ``wrt``."""
    x = points.clone().requires_grad_()
    value = model(x)[:, 0]
    for index in wrt:
        value = torch.autograd.grad(value, x, torch.ones_like(value), create_graph=True)[0][:, index]
    return value


def graph_laplacian(model, points):
    x = points.clone().requires_grad_()
    return ad.laplacian(model(x), x)


def forward_mode_laplacian(model, points):
    return ad.forward_laplacian(model, points).laplacian[:, 0]


def graph_derivative(model, points, wrt):
    x = points.clone().requires_grad_()
    return ad.derivative(model(x), x, wrt)


def forward_mode_derivative(model, points, wrt):
    return ad.forward_derivative(model, points, wrt)[:, 0]


def with_backward(function):
    """The derivative, then backward of a mean-square loss of it to the parameters."""

    def step(*args):
        result = function(*args)
        result.square().mean().backward()
        return result

    return step


def best_times(functions, arguments, repeats):
    """Best wall time of each function, running them interleaved so that load affects all alike."""
    best = [float("inf")] * len(functions)
    for function in functions:
        function(*arguments)  # warm-up
    for _ in range(repeats):
        for position, function in enumerate(functions):
            start = time.perf_counter()
            function(*arguments)
            best[position] = min(best[position], time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 points and fewer repeats")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    arguments = parser.parse_args()
    torch.set_num_threads(arguments.threads)
    points_count = 2_000 if arguments.quick else 10_000
    repeats = 3 if arguments.quick else 7
    print(f"4x64 tanh MLP, {points_count} points, float32, {arguments.threads} thread(s), best of {repeats}")
    ratios = {}
    for dimension in (2, 3):
        torch.manual_seed(0)
        model = MLP(dimension, 1, hidden_features=64, hidden_layers=4, activation="tanh")
        points = torch.rand(points_count, dimension)
        cases = [
            ("laplacian", naive_laplacian, graph_laplacian, ()),
            ("forward_laplacian", naive_laplacian, forward_mode_laplacian, ()),
            ("laplacian+backward", with_backward(naive_laplacian), with_backward(graph_laplacian), ()),
            (
                "forward_laplacian+backward",
                with_backward(naive_laplacian),
                with_backward(forward_mode_laplacian),
                (),
            ),
            ("d4u/dx0^4", naive_derivative, graph_derivative, ((0, 0, 0, 0),)),
            ("d4u/dx0^2dx1^2", naive_derivative, graph_derivative, ((0, 0, 1, 1),)),
            ("forward d4u/dx0^4", naive_derivative, forward_mode_derivative, ((0, 0, 0, 0),)),
            ("forward d4u/dx0^2dx1^2", naive_derivative, forward_mode_derivative, ((0, 0, 1, 1),)),
        ]
        for name, naive, ours, extra in cases:
            model.zero_grad()
            reference, result = naive(model, points, *extra), ours(model, points, *extra)
            scale = reference.abs().max().item()
            error = (result - reference).abs().max().item() / scale
            if error > 1e-3:
                raise RuntimeError(
                    f"{name} in {dimension}D disagrees with the naive loop: relative error {error:.2e}"
                )
            naive_time, our_time = best_times([naive, ours], (model, points, *extra), repeats)
            ratios[f"{name} {dimension}D"] = naive_time / our_time
            print(
                f"{dimension}D {name:28s} naive {1e3 * naive_time:8.1f} ms   ours {1e3 * our_time:8.1f} ms   "
                f"speed-up {naive_time / our_time:5.2f}x   (max rel. difference {error:.1e})"
            )
    print("ratio naive/ours: " + ", ".join(f"{name} {ratio:.2f}" for name, ratio in ratios.items()))


if __name__ == "__main__":
    main()
