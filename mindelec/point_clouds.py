"""Labelled point clouds of shapes: points on each object's surface and in the volume around them.

:func:`sample_point_cloud` takes ``common.geometry`` shapes (analytic, or CAD
:class:`mindelec.cad.MeshGeometry`) with material labels and returns points, labels, normals and a
surface flag, the input of point-cloud field surrogates. Lengths in the shapes' unit (m for the FDTD).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from common.errors import ConfigurationError
from common.geometry import Geometry

__all__ = ["sample_point_cloud"]


def sample_point_cloud(
    objects: Sequence[tuple[Geometry, int]],
    domain: Geometry,
    surface_density: float,
    volume_density: float,
    seed: int | None = None,
    dtype=None,
    device=None,
) -> dict:
    """Labelled point cloud: points on each object's surface and uniform points in the domain.

    Args:
        objects: ``(shape, label)`` pairs (labels ``>= 1``; e.g. material indices); later objects override
            earlier ones where they overlap.
        domain: the region of the volume points (e.g. ``Box(lo, hi)``), same dimension as the objects.
        surface_density: surface points per unit boundary measure (per m^2 in 3D, per m in 2D); each
            object gets ``round(density * boundary_measure)``.
        volume_density: volume points per unit volume of the domain (m^-3 in 3D).
        seed: integer seed.

    Returns:
        dict of tensors, ``N`` points in all: ``points`` (N, d); ``labels`` (N,) int64 (surface points: their
        object's label; volume points: the label of the last object containing them, 0 outside all);
        ``normals`` (N, d) outward unit normals (zero for volume points); ``on_surface`` (N,) bool.

    Raises:
        ValueError: for labels < 1, negative densities or shapes of another dimension than ``domain``.
    """
    if surface_density < 0 or volume_density < 0:
        raise ConfigurationError(
            f"sample_point_cloud: densities must be >= 0, got surface_density={surface_density}, "
            f"volume_density={volume_density}"
        )
    points, labels, normals, surface = [], [], [], []
    for index, (shape, label) in enumerate(objects):
        if int(label) < 1:
            raise ConfigurationError(
                f"sample_point_cloud: objects[{index}] has label {label}; labels must be >= 1 "
                "(0 is the background)"
            )
        if shape.dim != domain.dim:
            raise ConfigurationError(
                f"sample_point_cloud: objects[{index}] is {shape.dim}D, the domain {domain.dim}D"
            )
        count = round(surface_density * shape.boundary_measure)
        if count:
            seed_k = None if seed is None else seed + 1 + index
            on_boundary, outward = shape.sample_boundary(count, seed=seed_k, dtype=dtype, device=device)
            points.append(on_boundary)
            normals.append(outward)
            labels.append(torch.full((count,), int(label), dtype=torch.int64, device=on_boundary.device))
            surface.append(torch.ones(count, dtype=torch.bool, device=on_boundary.device))
    count = round(volume_density * domain.volume)
    if count:
        volume_points = domain.sample_interior(count, seed=seed, dtype=dtype, device=device)
        volume_labels = torch.zeros(count, dtype=torch.int64, device=volume_points.device)
        for shape, label in objects:
            volume_labels[shape.contains(volume_points)] = int(label)
        points.append(volume_points)
        normals.append(torch.zeros_like(volume_points))
        labels.append(volume_labels)
        surface.append(torch.zeros(count, dtype=torch.bool, device=volume_points.device))
    if not points:
        raise ConfigurationError("sample_point_cloud: the densities give no points")
    return {
        "points": torch.cat(points),
        "labels": torch.cat(labels),
        "normals": torch.cat(normals),
        "on_surface": torch.cat(surface),
    }
