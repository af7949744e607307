"""FDTD reference solutions of a point-source set-up, and the PINN's relative errors against them.

:func:`fdfd_reference` is the frequency-domain counterpart (:mod:`mindelec.fdfd`) for
:func:`~mindelec.pinn.helmholtz_problem`. :func:`fdtd_reference` solves a
:class:`mindelec.pinn.PointSourceSetup` with :mod:`mindelec.fdtd` (the
same smoothed source as a distributed current, the domain surrounded by a CPML, i.e. the open-domain
solution) and samples it; :meth:`FDTDReference.relative_errors` compares a network with the samples.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch
from torch import nn

from common import pde
from common.deprecation import renamed_arguments
from common.errors import ConfigurationError
from common.units import VACUUM_IMPEDANCE
from mindelec.pinn.sources import PointSourceSetup, Scales

__all__ = ["FDFDReference", "FDTDReference", "fdfd_reference", "fdtd_reference"]


@dataclasses.dataclass
class FDTDReference:
    """Field samples of an FDTD run: per component, SI points ``(N, 3)`` (x, y, t) and values ``(N,)``.

    Each component is sampled at its own Yee nodes and times (E at ``n dt``, H at ``(n - 1/2) dt``).
    """

    points: dict[str, torch.Tensor]
    values: dict[str, torch.Tensor]

    def relative_errors(
        self,
        model: nn.Module,
        scales: Scales,
        components: Sequence[str],
        parameters: Sequence[float] = (),
        chunk: int = 65536,
    ) -> dict[str, float]:
        """Relative L2 error of each component of ``model`` (dimensionless network) against the samples.

        Args:
            model: network on dimensionless points; components: its output names.
            scales: the problem's :class:`Scales`.
            parameters: values of the parameter columns (parametric problems), dimensionless.
            chunk: points per forward pass.
        """
        errors = {}
        dtype = next(model.parameters()).dtype
        for name, points in self.points.items():
            column = components.index(name)
            extra = torch.tensor(list(parameters), dtype=torch.float64).expand(len(points), len(parameters))
            points = torch.cat([points, extra], 1)
            with torch.no_grad():
                predicted = torch.cat(
                    [
                        scales.fields_si(model, part.to(dtype), components)[:, column].double()
                        for part in points.split(chunk)
                    ]
                )
            errors[name] = float(pde.relative_l2(predicted, self.values[name]))
        return errors


@renamed_arguments(resolution="cell_size")
def fdtd_reference(
    setup: PointSourceSetup,
    cell_size: float = 2.5e-3,
    frames: int = 20,
    stride: int = 2,
    pml_cells: int = 20,
    dtype: torch.dtype = torch.float64,
) -> FDTDReference:
    """Solve ``setup`` with :mod:`mindelec.fdtd`, the same smoothed source as a distributed current.

    The PINN's domain is surrounded by a CPML (``pml_cells`` thick) so the reference is the open-domain
    solution; the source is one point current per Yee node within 4 radii of the centre, each
    carrying ``amplitude * g(node) * dx * dy``, i.e. the current density ``amplitude * g * waveform``.

    Args:
        setup: a non-parametric :class:`PointSourceSetup`.
        cell_size: FDTD cell size (m; ``resolution=``, the old name, warns); 2.5 mm resolves
            the shortest wavelength of the default pulse
            (~0.12 m) with ~50 cells.
        frames: number of snapshots over ``[0, duration]``.
        stride: keep every ``stride``-th node along x and y.
        pml_cells: CPML thickness in cells, outside the PINN domain.
        dtype: FDTD precision.

    Returns:
        :class:`FDTDReference` with points in the setup's SI coordinates.
    """
    from mindelec import fdtd

    if isinstance(setup.permittivity, (tuple, list)) or isinstance(setup.permeability, (tuple, list)):
        raise ConfigurationError("fdtd_reference: give one permittivity and permeability value, not a range")
    extent = [u - lo for lo, u in zip(setup.lower, setup.upper)]
    cells = [round(e / cell_size) for e in extent]
    spacing = [e / n for e, n in zip(extent, cells)]
    size = [e + 2 * pml_cells * h for e, h in zip(extent, spacing)]
    center = [(lo + u) / 2 for lo, u in zip(setup.lower, setup.upper)]  # SI position of the FDTD origin
    source = setup.source()
    driven = "Hz" if setup.polarization == "TE" else "Ez"
    grid = fdtd.Grid(size, cell_size)
    node_axes = [grid.coordinates(driven, a) + center[a] for a in range(2)]
    xx, yy = torch.meshgrid(*node_axes, indexing="ij")
    nodes = torch.stack([xx.flatten(), yy.flatten()], 1)
    near = (nodes - torch.tensor(source.position, dtype=nodes.dtype)).norm(dim=1) <= 4 * source.radius
    weights = source.amplitude * source.profile(nodes[near]) * grid.cell_volume
    sources = [
        fdtd.PointDipole(
            tuple((node - torch.tensor(center, dtype=node.dtype)).tolist()),
            driven,
            source.waveform,
            amplitude=float(weight),
        )
        for node, weight in zip(nodes[near], weights)
    ]
    set_up = dict(
        boundary=fdtd.PML(thickness=pml_cells),
        sources=sources,
        default_medium=fdtd.Medium(permittivity=setup.permittivity, permeability=setup.permeability),
        polarization=setup.polarization,
        dtype=dtype,
    )
    # the snapshot spacing follows from the time step, which the set-up without monitors gives
    steps = math.ceil(setup.duration / fdtd.Simulation(size, cell_size, **set_up).dt - 1e-9)
    snapshots = fdtd.Snapshots("frames", every=max(1, steps // frames), components=setup.components)
    simulation = fdtd.Simulation(size, cell_size, monitors=[snapshots], **set_up)
    result = simulation.run(until=setup.duration)["frames"]
    points, values = {}, {}
    for name in setup.components:
        axes = [grid.coordinates(name, a) + center[a] for a in range(2)]
        keep = [
            ((axis >= lo - 1e-12) & (axis <= u + 1e-12)).nonzero()[:, 0][::stride]
            for axis, lo, u in zip(axes, setup.lower, setup.upper)
        ]
        times = result["times"] - (0.5 * simulation.dt if name.startswith("H") else 0.0)
        frames_kept = result[name][:, keep[0]][:, :, keep[1]].double()
        tt, xx, yy = torch.meshgrid(times.double(), axes[0][keep[0]], axes[1][keep[1]], indexing="ij")
        points[name] = torch.stack([xx.flatten(), yy.flatten(), tt.flatten()], 1)
        values[name] = frames_kept.flatten()
    return FDTDReference(points, values)


@dataclasses.dataclass
class FDFDReference:
    """The FDFD field of a :func:`~mindelec.pinn.helmholtz_problem`: SI points ``(N, 2)`` and ``Ez`` phasors
    ``(N,)`` (complex) in the problem's dimensionless units and its ``exp(-i omega t)`` convention."""

    points: torch.Tensor
    values: torch.Tensor

    def relative_error(self, model: nn.Module, scales: Scales, chunk: int = 65536) -> float:
        """Relative L2 error of ``model`` ((B, 2) dimensionless points -> (B, 2) Re, Im Ez) against the
        samples."""
        dtype = next(model.parameters()).dtype
        origin = torch.tensor(scales.origin, dtype=torch.float64)
        with torch.no_grad():
            predicted = torch.cat(
                [
                    model(((part - origin) / scales.length).to(dtype)).double()
                    for part in self.points.split(chunk)
                ]
            )
        return float(pde.relative_l2(torch.view_as_complex(predicted.contiguous()), self.values))


def fdfd_reference(
    lower: Sequence[float],
    upper: Sequence[float],
    frequency: float,
    source,
    permittivity: float = 1.0,
    cell_size: float = 5e-3,
    pml_cells: int = 20,
    stride: int = 2,
) -> FDFDReference:
    """Solve :func:`~mindelec.pinn.helmholtz_problem`'s set-up with :mod:`mindelec.fdfd` in the open domain.

    The same smoothed source as a current density ``amplitude * g`` on the Ez nodes, a PML of ``pml_cells``
    outside the rectangle (so the reference is the open-domain field, which the problem's Sommerfeld sides
    approximate); FDFD's ``exp(+j omega t)`` phasor is conjugated to the problem's ``exp(-i omega t)`` and
    divided by the problem's field unit ``|amplitude| eta_0 / L`` (:class:`Scales` of the problem).

    Args:
        lower, upper: corners of the rectangle (m); frequency: (Hz); source: a :class:`PointSource`
            (``Jz``, amplitude in A); permittivity: relative, of the whole medium.
        cell_size: FDFD cell size (m); pml_cells: PML thickness (cells); stride: keep every
            ``stride``-th node.

    Returns:
        :class:`FDFDReference` on the nodes inside the rectangle.
    """
    from mindelec import fdfd

    extent = [u - lo for lo, u in zip(lower, upper)]
    center = [(lo + u) / 2 for lo, u in zip(lower, upper)]
    size = [e + 2 * pml_cells * cell_size for e in extent]
    shape = [round(s / cell_size) for s in size]
    simulation = fdfd.Simulation(
        size,
        cell_size,
        frequency,
        torch.full(shape, float(permittivity), dtype=torch.float64),
        pml_cells,
        "TM",
    )
    axes = [axis.double() + c for axis, c in zip(simulation.coordinates, center)]
    xx, yy = torch.meshgrid(*axes, indexing="ij")
    nodes = torch.stack([xx.flatten(), yy.flatten()], 1)
    density = (source.amplitude * source.profile(nodes)).reshape(xx.shape)
    field = simulation.solve(density.to(torch.complex128))
    keep = [
        ((axis >= lo - 1e-12) & (axis <= u + 1e-12)).nonzero()[:, 0][::stride]
        for axis, lo, u in zip(axes, lower, upper)
    ]
    inside = field[keep[0]][:, keep[1]]
    kx, ky = torch.meshgrid(axes[0][keep[0]], axes[1][keep[1]], indexing="ij")
    unit = abs(source.amplitude) * VACUUM_IMPEDANCE / max(extent)
    return FDFDReference(torch.stack([kx.flatten(), ky.flatten()], 1), inside.flatten().conj() / unit)
