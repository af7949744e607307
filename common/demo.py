"""The core's own demonstration: geometry sampling and exact derivatives on an L-shaped domain.

Run as ``python -m common.demo --output DIR``. It samples Sobol points inside an
L-shaped domain (a square minus a quarter, built by CSG) and on its boundary
with outward normals, evaluates the field ``u = sin(pi x) sin(pi y) exp(x y)``,
takes its Laplacian and gradient with :mod:`common.autodiff`, compares them with
the closed-form expressions, and writes a picture and a CSV of the errors into
``DIR``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from common import autodiff as ad
from common.geometry import Rectangle


def field(points: torch.Tensor) -> torch.Tensor:
    """``u(x, y) = sin(pi x) sin(pi y) exp(x y)`` for points ``(B, 2)`` -> ``(B,)``."""
    x, y = points[:, 0], points[:, 1]
    return torch.sin(math.pi * x) * torch.sin(math.pi * y) * torch.exp(x * y)


def exact_laplacian(points: torch.Tensor) -> torch.Tensor:
    """Closed-form Laplacian of :func:`field` at ``points (B, 2)`` -> ``(B,)``."""
    x, y = points[:, 0], points[:, 1]
    pi = math.pi
    sx, cx, sy, cy = torch.sin(pi * x), torch.cos(pi * x), torch.sin(pi * y), torch.cos(pi * y)
    e = torch.exp(x * y)
    # d2/dx2 [sx e] sy = sy e (-pi^2 sx + 2 pi y cx + y^2 sx); same with x <-> y.
    d2x = sy * e * (-(pi**2) * sx + 2 * pi * y * cx + y**2 * sx)
    d2y = sx * e * (-(pi**2) * sy + 2 * pi * x * cy + x**2 * sy)
    return d2x + d2y


def exact_gradient(points: torch.Tensor) -> torch.Tensor:
    """Closed-form gradient of :func:`field` at ``points (B, 2)`` -> ``(B, 2)``."""
    x, y = points[:, 0], points[:, 1]
    pi = math.pi
    sx, cx, sy, cy = torch.sin(pi * x), torch.cos(pi * x), torch.sin(pi * y), torch.cos(pi * y)
    e = torch.exp(x * y)
    return torch.stack([sy * e * (pi * cx + y * sx), sx * e * (pi * cy + x * sy)], dim=1)


def run(output: Path, n_interior: int = 4096, n_boundary: int = 512) -> dict[str, float]:
    """Run the demonstration and write ``core_demo.png`` and ``core_demo.csv`` into ``output``.

    Returns:
        Maximum absolute errors of the autodiff Laplacian and of the boundary normal
        derivative against their closed forms.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    output.mkdir(parents=True, exist_ok=True)
    domain = Rectangle((0.0, 0.0), (1.0, 1.0)) - Rectangle((0.5, 0.5), (1.0, 1.0))
    interior = domain.sample_interior(n_interior, sampler="sobol", seed=0, dtype=torch.float64)
    interior.requires_grad_(True)
    laplacian = ad.laplacian(field(interior), interior)
    laplacian_error = (laplacian - exact_laplacian(interior)).abs().max().item()

    boundary, normals = domain.sample_boundary(n_boundary, sampler="sobol", seed=0, dtype=torch.float64)
    boundary.requires_grad_(True)
    normal_derivative = (ad.grad(field(boundary), boundary) * normals).sum(dim=1)
    exact_normal_derivative = (exact_gradient(boundary) * normals).sum(dim=1)
    normal_error = (normal_derivative - exact_normal_derivative).abs().max().item()

    points = interior.detach().numpy()
    figure, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    image = axes[0].scatter(points[:, 0], points[:, 1], c=laplacian.detach().numpy(), s=3, cmap="RdBu_r")
    figure.colorbar(image, ax=axes[0], label="Laplacian of u (autodiff)")
    edge = boundary.detach().numpy()
    axes[0].quiver(edge[::8, 0], edge[::8, 1], normals[::8, 0], normals[::8, 1], scale=25, width=0.004)
    axes[0].set(title="Sobol points in an L-shaped domain, outward normals", xlabel="x", ylabel="y")
    axes[0].set_aspect("equal")
    error = (laplacian - exact_laplacian(interior)).abs().detach().numpy()
    axes[1].hist(error, bins=50)
    axes[1].set(title="|autodiff - closed form| of the Laplacian", xlabel="absolute error", ylabel="points")
    figure.tight_layout()
    figure.savefig(output / "core_demo.png", dpi=120)
    plt.close(figure)

    results = {"laplacian_max_abs_error": laplacian_error, "normal_derivative_max_abs_error": normal_error}
    with open(output / "core_demo.csv", "w") as handle:
        handle.write("quantity,value\n")
        for name, value in results.items():
            handle.write(f"{name},{value:.3e}\n")
    return results


def main(argv: list[str] | None = None) -> None:
    """Run the demo: write the geometry samples, the autodiff check and their figures under ``--output``."""
    parser = argparse.ArgumentParser(prog="python -m common.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path("demo_output/core"), help="output folder")
    args = parser.parse_args(argv)
    results = run(args.output)
    for name, value in results.items():
        print(f"  {name}: {value:.3e}")
    print(f"core demo: wrote {args.output / 'core_demo.png'} and {args.output / 'core_demo.csv'}")


if __name__ == "__main__":
    main()
