"""Parameterised demo devices: a dielectric obstacle in a 2D waveguide and a 3D microstrip patch antenna.

:func:`waveguide_obstacle` is the structure of :mod:`mindelec.sweeps` (``mindelec.fdtd.Structure``
objects); :func:`patch_antenna_meshes` returns the watertight meshes of the antenna's parts, to go through
:mod:`mindelec.cad` like a CAD file. Lengths in metres.
"""

from __future__ import annotations

import numpy as np

from common import checks
from common.deprecation import moved_attributes
from common.errors import ConfigurationError

__all__ = ["waveguide_obstacle", "patch_antenna_meshes"]


def waveguide_obstacle(length: float, width: float, permittivity: float = 4.0, height: float = 20e-3):
    """A dielectric block in a 2D parallel-plate waveguide (the structure of :mod:`mindelec.sweeps`).

    The block spans ``x`` in ``[-length/2, length/2]`` and ``y`` from the lower wall ``-height/2`` up to
    ``-height/2 + width`` (it extends past the walls, which the PEC boundary ignores).

    Args:
        length, width, height: m.
        permittivity: the block's relative permittivity.

    Returns:
        ``[mindelec.fdtd.Structure]`` (a 2D ``Rectangle`` filled with a ``Medium``).
    """
    from common.geometry import Rectangle
    from mindelec import fdtd

    bottom = -height / 2
    top = bottom + width if width < height else height  # a full-height block reaches past the upper wall
    block = Rectangle((-length / 2, bottom - height), (length / 2, top))
    return [fdtd.Structure(block, fdtd.Medium(permittivity=permittivity))]


def patch_antenna_meshes(
    patch_length: float = 12e-3,
    patch_width: float = 16e-3,
    substrate_size=(30e-3, 30e-3),
    substrate_thickness: float = 1.6e-3,
    metal_thickness: float = 0.1e-3,
    feed_width: float = 3e-3,
) -> dict:
    """Watertight box meshes of a microstrip patch antenna, centred on the origin (m).

    The substrate lies on ``z`` in ``[-substrate_thickness/2, substrate_thickness/2]``; the ground plane
    below it and the patch and its microstrip feed (to the substrate's ``-x`` edge) on top.

    Args:
        patch_length: along x (m, sets the resonance ``~ c / (2 L sqrt(eps_eff))``).
        patch_width: along y (m).
        substrate_size: (x, y) extent of substrate and ground (m).
        substrate_thickness, metal_thickness, feed_width: m.

    Returns:
        dict ``{"substrate", "ground", "patch", "feed"}`` of ``trimesh.Trimesh``.
    """
    import trimesh

    for name, value in (
        ("patch_length", patch_length),
        ("patch_width", patch_width),
        ("substrate_thickness", substrate_thickness),
        ("metal_thickness", metal_thickness),
        ("feed_width", feed_width),
    ):
        checks.positive(value, f"patch_antenna_meshes: {name} (m)")
    sx, sy = (float(v) for v in substrate_size)
    if patch_length >= sx or patch_width >= sy or feed_width >= patch_width:
        raise ConfigurationError(
            f"patch_antenna_meshes: the patch ({patch_length} x {patch_width} m) and feed ({feed_width} m) "
            f"must fit on the substrate ({sx} x {sy} m)"
        )
    half_t, t = substrate_thickness / 2, metal_thickness

    def box(lo, hi, name):
        mesh = trimesh.creation.box(extents=np.subtract(hi, lo))
        mesh.apply_translation(np.add(lo, hi) / 2)
        mesh.metadata["name"] = name
        return mesh

    return {
        "substrate": box((-sx / 2, -sy / 2, -half_t), (sx / 2, sy / 2, half_t), "substrate"),
        "ground": box((-sx / 2, -sy / 2, -half_t - t), (sx / 2, sy / 2, -half_t), "ground"),
        "patch": box(
            (-patch_length / 2, -patch_width / 2, half_t),
            (patch_length / 2, patch_width / 2, half_t + t),
            "patch",
        ),
        "feed": box(
            (-sx / 2, -feed_width / 2, half_t), (-patch_length / 2, feed_width / 2, half_t + t), "feed"
        ),
    }


# ``patch_antenna`` was also the name of mindelec.antennas' FDTD model of a design
__getattr__ = moved_attributes(__name__, {"patch_antenna": "mindelec.devices:patch_antenna_meshes"})
