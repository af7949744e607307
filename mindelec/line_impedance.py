"""Characteristic impedance of a transmission-line mode: voltage, current and power on its cross-section.

For a mode (or any field of one travelling wave) on a cross-section with conductors
(:mod:`mindelec.conductors`), with phasors ``E, H`` (mindelec's ``exp(j omega t)`` convention, peak
amplitudes as :mod:`mindelec.modes` returns them)::

    V = integral of E . dl  from the signal conductor to the ground, along a straight path
    I = closed integral of H . dl  around the signal conductor (current along the propagation axis)
    P = 1/2 Re integral (E x conj H) . axis dA        (time-averaged power, W; 1 W for a solved mode)

    Z_PV = |V|^2 / (2 P),   Z_PI = 2 P / |I|^2,   Z_VI = V / I

The factor 1/2 belongs to peak phasors: :class:`~mindelec.fdtd.FluxMonitor` reports
``Re integral (E x conj H) . n dA`` of DFT fields without it, which is ``2 P`` for the same phasors; every
definition here is a ratio of field quantities computed from the fields passed in, so fields of any scale
(a solved mode, or DFT fields of an FDTD run on the plane of a single travelling wave) give the same
impedances. For a true TEM line (homogeneous dielectric) the three agree with ``sqrt(L / C)``; for a
quasi-TEM one (microstrip) they differ a little at high frequency, ``Z_PI`` being Jansen & Kirschning's
choice (:func:`mindelec.lines.microstrip_dispersive`).

Paths on the Yee grid of the cross-section (axis 1, axis 2 transverse, nodes as in :mod:`mindelec.modes`):
the voltage path runs along integer nodes (a row or column), summing the E edges between them, from a node
of the signal conductor to a node of the ground, with no metal in between. By default it is the shortest
such straight path leaving the signal conductor through its centre row or column in each of the four
directions (a microstrip: down to the ground plane; a coplanar line: across the narrower slot; a coax:
radially). The current contour runs on half nodes around a box of integer nodes holding the whole
signal conductor and no other metal: by default the signal's bounding box, so the contour passes half a
cell outside it (Ampere's law on the grid: it encloses the conductor current and the displacement current
``j omega eps E_x`` of the enclosed nodes, small for a tight contour).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from common.errors import ConfigurationError

from . import conductors as metal

__all__ = ["LineImpedance", "line_impedance", "mode_impedance"]

#: per propagation axis: the components along array axes 1 and 2, the orientation of (axis 1, axis 2,
#: propagation axis) (+1 right-handed) and the longitudinal component
_TRANSVERSE = {"x": (1, 2, 1, 0), "y": (0, 2, -1, 1), "z": (0, 1, 1, 2)}


@dataclass(frozen=True)
class LineImpedance:
    """Voltage, current and power of a travelling wave and the impedances they define (module docstring).

    Attributes:
        voltage: complex V, signal minus ground; None when no automatic voltage path exists (then
            ``voltage_problem`` says why, and the voltage-based impedances refuse).
        current: complex A, along the propagation axis on the signal conductor.
        power: W, ``1/2 Re integral (E x conj H) . axis dA``.
        voltage_path: ``((i0, j0), (i1, j1))``, the integer nodes it runs between (signal, ground), or None.
        current_contour: ``(i_low, i_high, j_low, j_high)``, the integer nodes the contour encloses.
        voltage_problem: why there is no voltage (None when there is one), naming the caller.
    """

    voltage: complex | None
    current: complex
    power: float
    voltage_path: tuple | None
    current_contour: tuple
    voltage_problem: str | None = None

    def _voltage(self, name) -> complex:
        if self.voltage is None:
            raise ConfigurationError(
                f"{self.voltage_problem}; {name} needs a voltage: give voltage_path=((i0, j0), (i1, j1)), or "
                "use the power-current impedance (Z_PI = 2 P / |I|^2), which needs no voltage path"
            )
        return self.voltage

    @property
    def power_voltage(self) -> float:
        """``Z_PV = |V|^2 / (2 P)``, ohm.

        Raises:
            ConfigurationError: no voltage path (``voltage`` is None).
        """
        return abs(self._voltage("Z_PV = |V|^2 / 2P")) ** 2 / (2 * self.power)

    @property
    def power_current(self) -> float:
        """``Z_PI = 2 P / |I|^2``, ohm."""
        return 2 * self.power / abs(self.current) ** 2

    @property
    def voltage_current(self) -> complex:
        """``Z_VI = V / I``, ohm (complex on a lossy line).

        Raises:
            ConfigurationError: no voltage path (``voltage`` is None).
        """
        return self._voltage("Z_VI = V / I") / self.current


def _given_voltage_path(labels, signal, path, owner):
    """``((i0, j0), (i1, j1))``: the user's path, checked."""
    try:
        (i0, j0), (i1, j1) = ((int(a), int(b)) for a, b in path)
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"{owner}: voltage_path must be ((i0, j0), (i1, j1)), got {path!r}"
        ) from None
    if (i0 != i1) == (j0 != j1):
        raise ConfigurationError(f"{owner}: voltage_path {path!r} must run along one axis (a row or column)")
    inside = all(0 <= i < labels.shape[0] and 0 <= j < labels.shape[1] for i, j in ((i0, j0), (i1, j1)))
    if not inside or labels[i0, j0] != signal or labels[i1, j1] != 0:
        raise ConfigurationError(
            f"{owner}: voltage_path {path!r} must start on the signal conductor and end on the ground"
        )
    if (_between(labels, (i0, j0), (i1, j1)) >= 0).any():
        raise ConfigurationError(f"{owner}: voltage_path {path!r} passes through metal between its ends")
    return (i0, j0), (i1, j1)


def _voltage_path(labels, signal, path, owner):
    """``((i0, j0), (i1, j1))``: the given path checked, or the shortest automatic one (module docstring),
    None when there is none."""
    if path is not None:
        return _given_voltage_path(labels, signal, path, owner)
    nodes = np.argwhere(labels == signal)
    centre = np.round((nodes.min(0) + nodes.max(0)) / 2).astype(int)
    best = None
    for axis in (0, 1):
        # the signal's nodes on the centre line (or the line of its nodes nearest the centre)
        lines = nodes[:, 1 - axis]
        line = lines[np.argmin(np.abs(lines - centre[1 - axis]))]
        on_line = nodes[lines == line, axis]
        for step, start in ((-1, on_line.min()), (1, on_line.max())):
            node = [0, 0]
            node[1 - axis], node[axis] = line, start
            begin = tuple(node)
            while labels[tuple(node)] == signal or labels[tuple(node)] < 0:
                node[axis] += step
            end = tuple(node)
            if labels[end] == 0 and (best is None or abs(end[axis] - begin[axis]) < best[0]):
                best = (abs(end[axis] - begin[axis]), (begin, end))
    if best is None:
        return None
    return tuple(tuple(int(v) for v in node) for node in best[1])


def _between(labels, start, end):
    """The labels of the nodes strictly between two nodes of one row or column."""
    (i0, j0), (i1, j1) = start, end
    if i0 == i1:
        return labels[i0, min(j0, j1) + 1 : max(j0, j1)]
    return labels[min(i0, i1) + 1 : max(i0, i1), j0]


def _current_contour(labels, signal, contour, owner):
    """``(i_low, i_high, j_low, j_high)``: the given box checked, or the signal's bounding box."""
    nodes = np.argwhere(labels == signal)
    if contour is None:
        (i_low, j_low), (i_high, j_high) = nodes.min(0), nodes.max(0)
    else:
        try:
            i_low, i_high, j_low, j_high = (int(value) for value in contour)
        except (TypeError, ValueError):
            raise ConfigurationError(
                f"{owner}: current_contour must be (i_low, i_high, j_low, j_high), got {contour!r}"
            ) from None
    box = (int(i_low), int(i_high), int(j_low), int(j_high))
    n1, n2 = labels.shape[0] - 1, labels.shape[1] - 1
    if not (1 <= box[0] <= box[1] <= n1 - 1 and 1 <= box[2] <= box[3] <= n2 - 1):
        raise ConfigurationError(f"{owner}: current_contour {box} must lie inside the walls (nodes 1..n-1)")
    enclosed = labels[box[0] : box[1] + 1, box[2] : box[3] + 1]
    if (enclosed == signal).sum() != len(nodes) or ((enclosed >= 0) & (enclosed != signal)).any():
        raise ConfigurationError(
            f"{owner}: current_contour {box} must enclose the whole signal conductor and no other metal "
            "(it would cut through metal)"
        )
    return box


def line_impedance(
    electric,
    magnetic,
    conductor,
    cell_size,
    axis="x",
    signal=None,
    voltage_path=None,
    current_contour=None,
    owner="line_impedance",
) -> LineImpedance:
    """Voltage, current, power and impedances of one travelling wave on a line's cross-section.

    Args:
        electric, magnetic: (3, n1, n2) complex tensors or arrays, (E_x, E_y, E_z) in V/m and (H_x, H_y,
            H_z) in A/m on their Yee nodes of the cross-section (:mod:`mindelec.modes`), e.g. one mode of
            :func:`mindelec.modes.cross_section_modes`.
        conductor: the metal (:mod:`mindelec.conductors`), per cell (n1, n2) or per E node (3, n1, n2).
        cell_size: one length or ``(d1, d2)``, m.
        axis: the propagation axis, ``"x"``, ``"y"`` or ``"z"`` (the cross-section's axes as in
            :func:`mindelec.modes.cross_section_modes`).
        signal: an integer node ``(i, j)`` on the signal conductor, when several are separate from the
            ground.
        voltage_path: ``((i0, j0), (i1, j1))``, integer nodes on one row or column from the signal to the
            ground; default automatic (module docstring).
        current_contour: ``(i_low, i_high, j_low, j_high)``, the integer nodes the contour encloses;
            default the signal's bounding box.
        owner: the name the errors give (a port, a cross-section).

    Returns:
        :class:`LineImpedance`; when no automatic straight voltage path exists (a conductor enclosed by
        another), its ``voltage`` is None and the voltage-based impedances refuse, ``Z_PI`` does not.

    Raises:
        ConfigurationError: an unknown axis, bad shapes; no signal conductor (no return conductor apart from
            it, or all metal joined to the ground) or several without ``signal``; a given path or contour
            through metal, off the signal or the ground.
    """
    if axis not in _TRANSVERSE:
        raise ConfigurationError(f"line_impedance: axis must be 'x', 'y' or 'z', got {axis!r}")
    electric, magnetic = (
        torch.as_tensor(field).detach().cpu().to(torch.complex128).numpy() for field in (electric, magnetic)
    )
    if electric.ndim != 3 or electric.shape[0] != 3 or magnetic.shape != electric.shape:
        raise ConfigurationError(
            f"line_impedance: electric and magnetic must both be (3, n1, n2), got {electric.shape} and "
            f"{magnetic.shape}"
        )
    d1, d2 = (tuple(cell_size) if isinstance(cell_size, (tuple, list)) else (cell_size,) * 2)
    first, second, orientation, along = _TRANSVERSE[axis]
    pec = metal.pec_mask(metal.conductor_nodes(conductor, electric.shape[1:]))
    labels = metal.conductor_labels(pec[[along, first, second]])  # to (along the line, axis 1, axis 2)
    signal = metal.signal_conductor(labels, signal, owner)
    e1, e2, h1, h2 = electric[first], electric[second], magnetic[first], magnetic[second]
    path = _voltage_path(labels, signal, voltage_path, owner)
    voltage, problem = None, None
    if path is None:
        problem = (
            f"{owner}: no straight path through dielectric from the signal conductor's centre to the ground "
            "(the signal is enclosed by other metal)"
        )
    else:
        (i0, j0), (i1, j1) = path
        if i0 == i1:  # along axis 2: the E_2 edges between j0 and j1
            voltage = complex(np.sign(j1 - j0) * e2[i0, min(j0, j1) : max(j0, j1)].sum() * d2)
        else:
            voltage = complex(np.sign(i1 - i0) * e1[min(i0, i1) : max(i0, i1), j0].sum() * d1)
    il, ih, jl, jh = box = _current_contour(labels, signal, current_contour, owner)
    # counterclockwise in (axis 1, axis 2): +1 along the bottom (half node jl - 1/2), +2 up the right side
    circulation = (h1[il : ih + 1, jl - 1].sum() - h1[il : ih + 1, jh].sum()) * d1 + (
        h2[ih, jl : jh + 1].sum() - h2[il - 1, jl : jh + 1].sum()
    ) * d2
    power = 0.5 * orientation * np.sum(e1 * h2.conj() - e2 * h1.conj()).real * d1 * d2
    return LineImpedance(voltage, complex(orientation * circulation), float(power), path, box, problem)


def mode_impedance(modes, mode_index=0, axis="x", owner="mode_impedance", **paths) -> LineImpedance:
    """:func:`line_impedance` of mode ``mode_index`` of :func:`mindelec.modes.cross_section_modes` (solved
    with a ``conductor``; ``axis`` the one it was solved for); ``paths``: ``signal``, ``voltage_path``,
    ``current_contour``; ``owner`` names the caller in errors.

    Raises:
        ConfigurationError: modes solved without a conductor, or as :func:`line_impedance`.
    """
    if modes.conductor is None:
        raise ConfigurationError(
            f"{owner}: these modes were solved without a conductor; a characteristic impedance needs "
            "the line's metal (cross_section_modes(..., conductor=...))"
        )
    fields = modes.electric[mode_index], modes.magnetic[mode_index]
    return line_impedance(*fields, modes.conductor, modes.cell_size, axis, owner=owner, **paths)
