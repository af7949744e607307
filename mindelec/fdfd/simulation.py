"""The 2D FDFD :class:`Simulation` at one frequency: grid, PML, sources, solve, flux and modes.

The equations, conventions and validation are described in :mod:`mindelec.fdfd`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.sparse as sparse
import torch

from common import checks
from common.deprecation import renamed_arguments
from common.errors import ArgumentTypeError, ConfigurationError
from common.units import SPEED_OF_LIGHT, VACUUM_IMPEDANCE, VACUUM_PERMEABILITY, VACUUM_PERMITTIVITY

from ..fdtd.grid import Grid
from .linear import DifferenceOperators, complex_dtype, difference_matrices, solve_linear_system

__all__ = ["Simulation", "WaveguideMode", "PML_ORDER", "PML_REFLECTION"]

PML_ORDER = 3
PML_REFLECTION = 1e-8
_AXES = {"x": 0, "y": 1}
_POLARIZATIONS = ("TM", "TE")


@dataclass(frozen=True)
class WaveguideMode:
    """A guided mode of a waveguide cross-section (a grid line), for sources and monitors.

    Attributes:
        axis: propagation axis, ``"x"`` or ``"y"``.
        index: grid index along ``axis`` of the cross-section line (its main-field nodes).
        position: coordinate of that line along ``axis`` (m).
        profile: (M,) real tensor, the main-field profile along the line (M = cells across),
            normalised so that a forward wave of amplitude 1 carries 1 W/m (flux as
            measured by :meth:`Simulation.flux`).
        metric: (M,) tensor, 1 for TM and ``1/eps_r`` for TE: modes are orthogonal in
            ``sum(profile_a * metric * profile_b)``.
        wavenumber: discrete propagation constant ``kappa`` (rad/m) on the grid.
        effective_index: ``kappa / k0``.
    """

    axis: str
    index: int
    position: float
    profile: torch.Tensor
    metric: torch.Tensor
    wavenumber: float
    effective_index: float


class Simulation:
    """A 2D FDFD problem at one frequency.

    Args:
        size: (Lx, Ly) domain extent (m); the domain spans ``[-L/2, L/2]``.
        cell_size: cell size (m). The grid is a :class:`mindelec.fdtd.Grid` (attribute ``grid``):
            an axis has ``N = round(L / cell_size)`` cells and the actual spacing is ``L / N``
            (attribute ``spacing``). ``resolution=``, the old name, warns and still works for one
            release.
        frequency: frequency (Hz).
        permittivity: (Nx, Ny) tensor of relative permittivity at the main-field nodes
            (``coordinates``); real, or complex for lossy media (``eps' - j eps''`` in the
            ``exp(+j omega t)`` convention). May require grad. Its dtype (float32/float64)
            sets the precision of the returned fields, its device theirs.
        pml_thickness: PML thickness in cells (inside the domain, on all four sides).
        polarization: ``"TM"`` (Ez, Hx, Hy) or ``"TE"`` (Hz, Ex, Ey).

    The medium is non-magnetic (``mu_r = 1``).

    Raises:
        ValueError: for a non-2D size, a non-positive cell size or frequency, a PML that
            leaves no interior, a permittivity of the wrong shape, or an unknown polarisation.
        ConfigurationError: (a ValueError) for a frequency above :attr:`max_frequency`, giving it.
        DataError: (a ValueError) for a NaN or infinite permittivity, naming the cell.
        TypeError: if the permittivity is not a torch tensor.
    """

    @renamed_arguments(resolution="cell_size")
    def __init__(self, size, cell_size, frequency, permittivity, pml_thickness=10, polarization="TM"):
        if len(size) != 2 or any(float(length) <= 0 for length in size):
            raise ConfigurationError(f"fdfd.Simulation: size must be two positive lengths (m), got {size!r}")
        if not cell_size > 0:
            raise ConfigurationError(
                f"fdfd.Simulation: cell_size must be a positive cell size (m), got {cell_size!r}"
            )
        if not frequency > 0:
            raise ConfigurationError(f"fdfd.Simulation: frequency must be positive (Hz), got {frequency!r}")
        if polarization not in _POLARIZATIONS:
            raise ConfigurationError(
                f"fdfd.Simulation: polarization must be 'TM' or 'TE', got {polarization!r}")
        self.grid = Grid(size, cell_size)
        self.size = self.grid.size[:2]
        self.frequency = float(frequency)
        self.polarization = polarization
        self.shape = self.grid.shape[:2]
        self.spacing = self.grid.spacing[:2]
        # the main field: Ez on the integer Yee nodes (TM), Hz on the half nodes (TE), as in mindelec.fdtd
        self._main = "Ez" if polarization == "TM" else "Hz"
        self._offset = self.grid.offsets(self._main)[0]
        if not isinstance(permittivity, torch.Tensor):
            raise ArgumentTypeError(
                f"fdfd.Simulation: permittivity must be a torch tensor of shape {self.shape}, "
                f"got {type(permittivity).__name__}"
            )
        if tuple(permittivity.shape) != self.shape:
            raise ConfigurationError(
                f"fdfd.Simulation: permittivity has shape {tuple(permittivity.shape)}, expected {self.shape} "
                f"(size / cell_size cells along x and y)"
            )
        if int(pml_thickness) != pml_thickness or pml_thickness < 0:
            raise ConfigurationError(
                f"fdfd.Simulation: pml_thickness must be a whole number of cells, got {pml_thickness!r}"
            )
        if 2 * pml_thickness >= min(self.shape):
            raise ConfigurationError(
                f"fdfd.Simulation: PML of {pml_thickness} cells on each side is thicker than the domain "
                f"({self.shape[0]} x {self.shape[1]} cells); it must leave an interior"
            )
        self.pml_thickness = int(pml_thickness)
        checks.finite_cells(permittivity, "fdfd.Simulation: permittivity")
        self.permittivity = permittivity
        limit = self.max_frequency
        if self.frequency > limit:
            raise ConfigurationError(
                f"fdfd.Simulation: frequency {self.frequency:.6g} Hz is beyond what the grid carries, "
                f"{limit:.6g} Hz (two cells of {max(self.spacing):.6g} m per wavelength in the densest "
                f"medium, eps_r = {self._densest_permittivity():.6g}); make the cells smaller"
            )
        self.omega = 2.0 * math.pi * self.frequency
        self.wavenumber = self.omega / SPEED_OF_LIGHT
        # the constant in the right-hand side j omega c J: mu0 (TM, electric current) or eps0 (TE, magnetic)
        self._field_constant = VACUUM_PERMEABILITY if polarization == "TM" else VACUUM_PERMITTIVITY
        self._operators = self._build_operators()

    # ----- grid -----
    def _densest_permittivity(self) -> float:
        return float(self.permittivity.detach().real.max())

    @property
    def max_frequency(self) -> float:
        """The highest frequency (Hz) the grid carries: ``c / (2 dx_max sqrt(max Re eps_r))``.

        Two cells of the coarsest spacing per wavelength in the densest medium (the spatial Nyquist
        limit); above it the discrete Helmholtz operator no longer has a propagating solution there.
        Media with ``Re eps_r <= 0`` (metals) carry no wave and do not lower it.
        """
        densest = max(self._densest_permittivity(), torch.finfo(torch.float64).tiny)
        return SPEED_OF_LIGHT / (2.0 * max(self.spacing) * math.sqrt(densest))

    @property
    def coordinates(self):
        """Main-field node coordinates ``(x (Nx,), y (Ny,))`` (m), in the permittivity's real dtype."""
        dtype, device = self.permittivity.real.dtype, self.permittivity.device
        return tuple(self.grid.coordinates(self._main, axis, dtype, device) for axis in (0, 1))

    def _stretch(self, axis: int, offset: float, count: int) -> np.ndarray:
        """PML stretch factors ``s`` at ``-L/2 + (i + offset) d``, ``i = 0 .. count - 1``, along ``axis``."""
        length, step = self.size[axis], self.spacing[axis]
        if self.pml_thickness == 0:
            return np.ones(count, dtype=np.complex128)
        thickness = self.pml_thickness * step
        positions = -length / 2 + (np.arange(count) + offset) * step
        depth = np.clip(np.abs(positions) - (length / 2 - thickness), 0.0, thickness)
        sigma_max = -(PML_ORDER + 1) * math.log(PML_REFLECTION) / (2.0 * VACUUM_IMPEDANCE * thickness)
        sigma = sigma_max * (depth / thickness) ** PML_ORDER
        return 1.0 - 1j * sigma / (self.omega * VACUUM_PERMITTIVITY)

    def _build_operators(self) -> DifferenceOperators:
        matrices = []
        for axis in (0, 1):
            forward, backward = difference_matrices(self.shape[axis], self.spacing[axis])
            count = self.shape[axis]
            forward = sparse.diags(1.0 / self._stretch(axis, self._offset - 0.5, count + 1)) @ forward
            backward = sparse.diags(1.0 / self._stretch(axis, self._offset, count)) @ backward
            identity = sparse.identity(self.shape[1 - axis], format="csr")
            pair = (forward, identity) if axis == 0 else (identity, forward)
            matrices.append(sparse.kron(*pair, "csr"))
            pair = (backward, identity) if axis == 0 else (identity, backward)
            matrices.append(sparse.kron(*pair, "csr"))
        return DifferenceOperators(*matrices)

    def _half_cell_weights(self):
        """(W_x (Nx + 1, Ny), W_y (Nx, Ny + 1)) on the half nodes: 1 for TM, 1/eps_r for TE.

        Half node ``r`` lies between main nodes ``r - 1`` and ``r``; the first and last lie
        beyond the domain's edge nodes and take the edge permittivity.
        """
        permittivity = self.permittivity
        if self.polarization == "TM":
            return (
                permittivity.new_ones(self.shape[0] + 1, self.shape[1]),
                permittivity.new_ones(self.shape[0], self.shape[1] + 1),
            )
        padded_x = torch.cat([permittivity[:1, :], permittivity, permittivity[-1:, :]], dim=0)
        padded_y = torch.cat([permittivity[:, :1], permittivity, permittivity[:, -1:]], dim=1)
        return 2.0 / (padded_x[1:] + padded_x[:-1]), 2.0 / (padded_y[:, 1:] + padded_y[:, :-1])

    def _node_index(self, axis: int, coordinate: float, what: str, half: bool = False) -> int:
        """Nearest main-field node (or, with ``half``, the node before the nearest half node)."""
        length = self.size[axis]
        if not -length / 2 <= float(coordinate) <= length / 2:
            raise ConfigurationError(
                f"fdfd.Simulation.{what}: position {coordinate!r} lies outside the domain "
                f"[{-length / 2:g}, {length / 2:g}] m along {'xy'[axis]}"
            )
        offset = self._offset + (0.5 if half else 0.0)
        fractional = (float(coordinate) + length / 2) / self.spacing[axis] - offset
        return min(max(round(fractional), 0), self.shape[axis] - (2 if half else 1))

    def _zeros(self) -> torch.Tensor:
        return torch.zeros(
            self.shape, dtype=complex_dtype(self.permittivity.dtype), device=self.permittivity.device
        )

    # ----- sources -----
    def point_source(self, position, amplitude=1.0) -> torch.Tensor:
        """Current density of a line current through the nearest main-field node.

        The same normalisation as ``mindelec.fdtd`` sources: ``amplitude / (dx dy)`` on one node.

        Args:
            position: (x, y) in m.
            amplitude: the line current, A (TM: Jz) or V (TE: magnetic Mz).

        Returns:
            (Nx, Ny) complex tensor, the current density.
        """
        if len(position) != 2:
            raise ConfigurationError(
                f"fdfd.Simulation.point_source: position must be (x, y), got {position!r}")
        source = self._zeros()
        index = tuple(self._node_index(axis, position[axis], "point_source") for axis in (0, 1))
        source[index] = amplitude / (self.spacing[0] * self.spacing[1])
        return source

    def line_source(self, start, end, amplitude=1.0) -> torch.Tensor:
        """Uniform sheet current along an axis-aligned segment.

        Args:
            start, end: (x, y) end points (m); they must share x or y.
            amplitude: surface current density, A/m (TM) or V/m (TE).

        Returns:
            (Nx, Ny) complex tensor, current density ``amplitude / d`` on the nodes of the
            segment (``d`` the spacing across it).
        """
        first = [self._node_index(axis, start[axis], "line_source") for axis in (0, 1)]
        last = [self._node_index(axis, end[axis], "line_source") for axis in (0, 1)]
        if first[0] != last[0] and first[1] != last[1]:
            raise ConfigurationError(
                f"fdfd.Simulation.line_source: segment {tuple(start)!r} -> {tuple(end)!r} "
                "must be parallel to x or y"
            )
        across = 0 if first[0] == last[0] else 1
        low = [min(a, b) for a, b in zip(first, last)]
        high = [max(a, b) + 1 for a, b in zip(first, last)]
        source = self._zeros()
        source[low[0] : high[0], low[1] : high[1]] = amplitude / self.spacing[across]
        return source

    # ----- solve -----
    def solve(self, source: torch.Tensor) -> torch.Tensor:
        """Steady-state main field (Ez for TM, Hz for TE) driven by a current density.

        Args:
            source: (Nx, Ny) or (B, Nx, Ny) tensor, current density Jz (A/m^2, TM) or Mz
                (V/m^2, TE); a batch of B sources shares one factorisation.

        Returns:
            Complex tensor of the source's shape: Ez (V/m) or Hz (A/m). Differentiable with
            respect to the permittivity and the source (one adjoint solve per backward).

        Raises:
            DataError: (a ValueError) for a NaN or infinite source value, naming the cell.
        """
        if not isinstance(source, torch.Tensor):
            raise ArgumentTypeError(
                f"fdfd.Simulation.solve: source must be a torch tensor, got {type(source).__name__}"
            )
        if tuple(source.shape[-2:]) != self.shape or source.dim() not in (2, 3):
            raise ConfigurationError(
                f"fdfd.Simulation.solve: source has shape {tuple(source.shape)}, expected {self.shape} "
                f"or (batch, {self.shape[0]}, {self.shape[1]})"
            )
        checks.finite_cells(source, "fdfd.Simulation.solve: source")
        batch = source.reshape(-1, self.shape[0] * self.shape[1]).to(complex_dtype(self.permittivity.dtype))
        rhs = (1j * self.omega * self._field_constant) * batch.T
        weight_x, weight_y = self._half_cell_weights()
        if self.polarization == "TM":
            diagonal = self.wavenumber**2 * self.permittivity
        else:
            diagonal = torch.full_like(self.permittivity, self.wavenumber**2)
        solution = solve_linear_system(
            rhs, diagonal.reshape(-1), weight_x.reshape(-1), weight_y.reshape(-1), self._operators
        )
        return solution.T.reshape(source.shape)

    # ----- monitors (plain differentiable functions of a solved field) -----
    def _line(self, field: torch.Tensor, axis: str, position: float, what: str):
        """The main field on the two node lines either side of the half-node line nearest ``position``.

        Returns ``(before, after, weight, index)``: (..., M) fields on nodes ``index`` and
        ``index + 1`` along ``axis``, the (M,) W weights on the half-node line, and ``index``.
        """
        if axis not in _AXES:
            raise ConfigurationError(f"fdfd.Simulation.{what}: axis must be 'x' or 'y', got {axis!r}")
        dim = _AXES[axis]
        index = self._node_index(dim, position, what, half=True)
        weights = self._half_cell_weights()[dim]
        if dim == 0:
            return field[..., index, :], field[..., index + 1, :], weights[index + 1, :], index
        return field[..., :, index], field[..., :, index + 1], weights[:, index + 1], index

    def _span_mask(self, axis: str, span, like: torch.Tensor) -> torch.Tensor:
        """(M,) 0/1 mask of the nodes along a line normal to ``axis`` that lie within ``span`` (m)."""
        mask = torch.ones(like.shape[-1], dtype=like.dtype, device=like.device)
        if span is None:
            return mask
        along = self.coordinates[1 - _AXES[axis]]
        return mask * ((along >= min(span)) & (along <= max(span))).to(like.dtype)

    def flux(self, field: torch.Tensor, axis: str, position: float, span=None) -> torch.Tensor:
        """Time-averaged power per unit length through a line normal to ``axis`` (W/m).

        The line is the half-node line nearest to ``position``, where the transverse field
        (TM: Hy or Hx; TE: Ey or Ex) lives; the main field there is the mean of its two
        neighbours: ``S = -1/2 Re(conj(F) W dF/dn / (j omega c))``, ``c = mu0`` (TM) or
        ``eps0`` (TE). Positive means towards +axis.

        Args:
            field: (Nx, Ny) or (B, Nx, Ny) main field from :meth:`solve`.
            axis: ``"x"`` (a line x = position) or ``"y"``.
            position: coordinate of the line along ``axis`` (m).
            span: optional (low, high) range (m) along the line; default the whole line.

        Returns:
            Real tensor of shape () or (B,), differentiable.
        """
        before, after, weight, _ = self._line(field, axis, position, "flux")
        dim = _AXES[axis]
        average = 0.5 * (before + after)
        derivative = (after - before) / self.spacing[dim]
        impedance = 1j * self.omega * self._field_constant
        density = -0.5 * (average.conj() * derivative * weight / impedance).real
        return (density * self._span_mask(axis, span, density)).sum(-1) * self.spacing[1 - dim]

    def mode(self, axis: str, position: float, span=None, mode_index: int = 0) -> WaveguideMode:
        """Guided mode of the cross-section at ``position`` (a node line normal to ``axis``).

        Solves the 1D eigenproblem of the cross-section (the discretisation of the 2D
        operator, without PML stretching: the line ends are perfect conductors):
        TM ``(Db Df + k0^2 eps_r) m = beta^2 m``; TE ``(Db W Df + k0^2) m = beta^2 W m``.
        The discrete wavenumber along the axis follows from
        ``2 (cos(kappa d) - 1) / d^2 = -beta^2``. The mode is computed from the current
        permittivity and treated as a constant (no gradient flows through it): place ports
        where the guide is fixed, outside any design region.

        Args:
            axis: propagation axis, ``"x"`` or ``"y"``.
            position: coordinate of the cross-section along ``axis`` (m); the nearest node line.
            span: optional (low, high) range (m) across the guide to solve on; default the whole line.
            mode_index: 0 for the fundamental mode, 1 for the next, ...

        Raises:
            ValueError: if the requested mode is not guided.
        """
        if axis not in _AXES:
            raise ConfigurationError(f"fdfd.Simulation.mode: axis must be 'x' or 'y', got {axis!r}")
        dim = _AXES[axis]
        # the nearest node line (one short of the far edge: the metric lives on the half nodes after it)
        index = min(self._node_index(dim, position, "mode"), self.shape[dim] - 2)
        along, across = self.spacing[dim], self.spacing[1 - dim]
        line = self.permittivity[index, :] if dim == 0 else self.permittivity[:, index]
        weight = self._half_cell_weights()[dim]
        weight = weight[index + 1, :] if dim == 0 else weight[:, index + 1]
        mask = self._span_mask(axis, span, line.real).detach().to("cpu").numpy().astype(bool)
        count = int(mask.sum())
        if count < 3 or mode_index >= count:
            raise ConfigurationError(
                f"fdfd.Simulation.mode: the cross-section (span {span!r}) holds {count} nodes; "
                f"need at least 3 and more than mode_index = {mode_index}"
            )
        eps_line = line.detach().to("cpu").numpy().real[mask]
        metric = weight.detach().to("cpu").numpy().real[mask]
        forward, backward = difference_matrices(count, across)
        if self.polarization == "TM":
            cross_weight = np.ones(count + 1)
            potential = self.wavenumber**2 * eps_line
        else:
            # 1/eps_r at the half nodes across the guide, as in the 2D operator
            padded = np.concatenate([eps_line[:1], eps_line, eps_line[-1:]])
            cross_weight = 2.0 / (padded[1:] + padded[:-1])
            potential = np.full(count, self.wavenumber**2)
        stiffness = (backward @ sparse.diags(cross_weight) @ forward).toarray() + np.diag(potential)
        # symmetric tridiagonal form of the generalised problem: M^-1/2 K M^-1/2 v = beta^2 v
        scale = 1.0 / np.sqrt(metric)
        scaled = stiffness * scale[:, None] * scale[None, :]
        eigenvalues, eigenvectors = scipy.linalg.eigh_tridiagonal(
            np.diag(scaled), np.diag(scaled, 1), select="i", select_range=(count - 1 - mode_index, count - 1)
        )
        beta_squared = eigenvalues[0]
        cosine = 1.0 - beta_squared * along**2 / 2.0
        if beta_squared <= 0 or cosine <= -1:
            raise ConfigurationError(
                f"fdfd.Simulation.mode: mode {mode_index} at {axis} = {position:g} m is not guided "
                f"(beta^2 = {beta_squared:.4g} rad^2/m^2)"
            )
        wavenumber = math.acos(cosine) / along
        impedance_factor = 2.0 * math.tan(wavenumber * along / 2.0) / along
        # a unit forward wave carries 1/2 K / (omega c) sum(m W m) d  ->  normalise that to 1 W/m
        profile = eigenvectors[:, 0] * scale
        norm = np.sum(profile * metric * profile) * across
        profile = profile * math.sqrt(2.0 * self.omega * self._field_constant / (impedance_factor * norm))
        profile = profile * np.sign(profile[np.argmax(np.abs(profile))])
        full = np.zeros(mask.shape)
        full[mask] = profile
        real_dtype, device = self.permittivity.real.dtype, self.permittivity.device
        return WaveguideMode(
            axis=axis,
            index=index,
            position=-self.size[dim] / 2 + (index + self._offset) * along,
            profile=torch.as_tensor(full, dtype=real_dtype, device=device),
            metric=weight.detach().real.to(real_dtype),
            wavenumber=wavenumber,
            effective_index=wavenumber / self.wavenumber,
        )

    def mode_source(self, mode: WaveguideMode, direction: int = 1, amplitude=1.0) -> torch.Tensor:
        """Current density launching ``mode`` one way only.

        Two current sheets on the node lines ``mode.index`` and ``mode.index + direction``
        with the phases that cancel the wave going the other way (exact on the grid for a
        guide uniform along the axis around the source).

        Args:
            mode: from :meth:`mode`.
            direction: +1 (towards +axis) or -1.
            amplitude: complex amplitude of the launched mode at ``mode.position``, as
                :meth:`mode_amplitudes` reads it (power ``|amplitude|^2`` W/m).

        Returns:
            (Nx, Ny) complex tensor, current density (A/m^2 TM, V/m^2 TE).
        """
        if direction not in (1, -1):
            raise ConfigurationError(
                f"fdfd.Simulation.mode_source: direction must be +1 or -1, got {direction!r}")
        dim = _AXES[mode.axis]
        second = mode.index + direction
        if not 0 <= second < self.shape[dim]:
            raise ConfigurationError(
                f"fdfd.Simulation.mode_source: the mode line at {mode.position:g} m lies on the domain edge"
            )
        along = self.spacing[dim]
        phase = mode.wavenumber * along
        # a sheet b = w (-2j sin(kappa d) / d^2) W m radiates w m exp(-j kappa |x - x_sheet|); monitors
        # read the mean of two nodes, which scales a wave by cos(kappa d / 2)
        first_weight = amplitude / ((1.0 - np.exp(2j * phase)) * math.cos(phase / 2.0))
        second_weight = -first_weight * np.exp(1j * phase)
        sheet = (mode.metric * mode.profile) * (-2j * math.sin(phase) / along**2)
        sheet = sheet / (1j * self.omega * self._field_constant)
        source = self._zeros()
        for index, weight in ((mode.index, first_weight), (second, second_weight)):
            if dim == 0:
                source[index, :] = weight * sheet
            else:
                source[:, index] = weight * sheet
        return source

    def mode_amplitudes(self, field: torch.Tensor, mode: WaveguideMode, position: float):
        """Forward and backward amplitudes of ``mode`` in ``field`` through a line.

        Splits the main field on the half-node line nearest to ``position`` into the waves
        ``exp(-/+ j kappa x)`` using its mean ``F`` and difference ``dF`` across the line
        (a forward wave has ``dF = -j K F`` with ``K = 2 tan(kappa d / 2) / d``), then projects
        on the mode profile. ``|forward|^2`` is the power (W/m) the mode carries towards
        +axis; the phase is referenced to the line.

        Args:
            field: (Nx, Ny) or (B, Nx, Ny) main field from :meth:`solve`.
            mode: the mode (its profile must match the guide at ``position``).
            position: coordinate along ``mode.axis`` (m).

        Returns:
            (forward, backward): complex tensors of shape () or (B,), differentiable.
        """
        before, after, weight, _ = self._line(field, mode.axis, position, "mode_amplitudes")
        dim = _AXES[mode.axis]
        along = self.spacing[dim]
        average = 0.5 * (before + after)
        impedance_factor = 2.0 * math.tan(mode.wavenumber * along / 2.0) / along
        outgoing = (after - before) / along / (1j * impedance_factor)
        projector = (mode.profile * weight).to(field.dtype)
        scale = impedance_factor / (2.0 * self.omega * self._field_constant) * self.spacing[1 - dim]
        forward = (0.5 * (average - outgoing) * projector).sum(-1) * scale
        backward = (0.5 * (average + outgoing) * projector).sum(-1) * scale
        return forward, backward
