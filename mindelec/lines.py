"""Printed-circuit and coaxial lines: their cross-sections on the mode solvers' grid, and closed forms.

Cross-sections (for :func:`mindelec.modes.cross_section_modes`, :func:`mindelec.quasi_tem.quasi_tem_line`
and :mod:`mindelec.line_impedance`), each a pair ``(permittivity, conductor)``: the relative permittivity
per cell (n1, n2) float64 and the PEC E nodes (3, n1, n2) bool (:mod:`mindelec.conductors`), axis 1 across
the board (``y``) and axis 2 up (``z``), the domain's PEC walls all round; the node mask's components are
(along the line, across, up), the (E_x, E_y, E_z) of a line along ``x`` (reorder them for another axis):

* :func:`microstrip_section` - a zero-thickness strip on a substrate whose ground is the bottom wall;
* :func:`coplanar_section` - conductor-backed coplanar waveguide: a zero-thickness strip between two
  coplanar grounds reaching the side walls, on a substrate on the bottom wall (the backing ground);
* :func:`coax_section` - a coaxial line, its conductors staircased by node containment.

Strips lie on a node row (their E_x and E_y nodes pinned), so a width is a whole number of cells.

Closed forms (zero-thickness, lossless conductors; lengths in m, frequencies in Hz):

* :func:`microstrip_static` - Hammerstad & Jensen, "Accurate models for microstrip computer-aided
  design", IEEE MTT-S Digest 1980, pp. 407-409: ``Z0`` and ``eps_eff`` at zero frequency (0.01 % and
  0.2 % from their reference for ``0.01 <= w/h <= 100``, ``eps_r <= 128``);
* :func:`microstrip_dispersive` - Kirschning & Jansen, Electron. Lett. 18, 272 (1982) for
  ``eps_eff(f)`` and Jansen & Kirschning, Arch. Elek. Ubertragung. 37, 108 (1983) for the power-current
  ``Z0(f)`` (0.6 % up to 60 GHz for ``0.1 <= w/h <= 100``, ``1 <= eps_r <= 20``, ``h f <= 25 GHz mm``),
  as in scikit-rf's ``MLine`` and Qucs;
* :func:`coplanar_backed` - conformal mapping of conductor-backed CPW (Ghione & Naldi, Electron. Lett.
  20, 179 (1984); Simons, Coplanar Waveguide Circuits, Components and Systems, Wiley 2001, sec. 3.2);
* :func:`coax_impedance` - ``Z0 = eta0 / (2 pi sqrt(eps_r)) ln(b / a)``;
* :func:`microstrip_open_end` - the length by which an open end's fringing field lengthens a microstrip
  (Kirschning, Jansen & Koster, Electron. Lett. 17, 123 (1981), as Qucs's ``MOPEN``), for stubs;
* :func:`microstrip_tee_stub_offset` - where a T-junction's side arm (a stub) starts: Hammerstad's
  reference-plane displacement (Hammerstad, Proc. 5th European Microwave Conf. 1975, pp. 268-272; as
  Qucs's ``MTEE``).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.special
import torch

from common.errors import ConfigurationError
from common.units import VACUUM_IMPEDANCE

__all__ = [
    "microstrip_section",
    "coplanar_section",
    "coax_section",
    "microstrip_static",
    "microstrip_dispersive",
    "coplanar_backed",
    "coax_impedance",
    "microstrip_open_end",
    "microstrip_tee_stub_offset",
]


def _cells(length, cell, name) -> int:
    """``length / cell`` when it is a whole number of cells (to 1e-6)."""
    count = length / cell
    if not (count >= 1 and abs(count - round(count)) < 1e-6):
        raise ConfigurationError(
            f"{name}={length:g} m must be a whole number (>= 1) of cells of {cell:g} m (it is {count:.4g})"
        )
    return round(count)


def _strip(pec, low, high, row):
    """Pin the E_x nodes ``low..high`` and the E_y edges between them on node row ``row``."""
    pec[0, low : high + 1, row] = True
    pec[1, low:high, row] = True


def _substrate_in_box(height, permittivity, cell_size, box_width, box_height):
    """A substrate of ``height`` (m) on the bottom wall of a box: ``(permittivity (n1, n2), an empty
    conductor mask (3, n1, n2), the substrate's cells)``."""
    cells_1, cells_2 = _cells(box_width, cell_size, "box_width"), _cells(box_height, cell_size, "box_height")
    substrate = _cells(height, cell_size, "height")
    eps = torch.ones(cells_1, cells_2, dtype=torch.float64)
    eps[:, :substrate] = permittivity
    return eps, np.zeros((3, cells_1, cells_2), dtype=bool), substrate


def microstrip_section(width, height, permittivity, cell_size, box_width, box_height):
    """A microstrip in a PEC box: ``(permittivity (n1, n2), conductor (3, n1, n2))`` tensors.

    Args:
        width: the strip's width (m), centred across the box (an even number of cells if the box's is).
        height: the substrate's thickness (m), the strip lying on it; the ground is the bottom wall.
        permittivity: the substrate's relative permittivity (air above).
        cell_size: the square cells' size (m); every length must be a whole number of them.
        box_width, box_height: the PEC box (m); walls a few ``width + 2 height`` away barely matter.

    Raises:
        ConfigurationError: a length that is not a whole number of cells, or a strip that does not fit.
    """
    eps, pec, substrate = _substrate_in_box(height, permittivity, cell_size, box_width, box_height)
    cells_1 = pec.shape[1]
    strip = _cells(width, cell_size, "width")
    if strip >= cells_1 - 1 or substrate >= pec.shape[2] - 1:
        raise ConfigurationError("microstrip_section: the strip must lie inside the box, off its walls")
    low = (cells_1 - strip) // 2
    _strip(pec, low, low + strip, substrate)
    return eps, torch.from_numpy(pec)


def coplanar_section(width, gap, height, permittivity, cell_size, box_width, box_height):
    """A conductor-backed coplanar waveguide in a PEC box: ``(permittivity, conductor)`` tensors.

    The strip (``width``, centred) and the two grounds (from the gaps to the side walls) lie on the
    substrate (``height``, on the bottom wall, which is the backing ground). Arguments as
    :func:`microstrip_section`; ``gap`` (m) is each slot's width.
    """
    eps, pec, substrate = _substrate_in_box(height, permittivity, cell_size, box_width, box_height)
    cells_1 = pec.shape[1]
    strip, slot = _cells(width, cell_size, "width"), _cells(gap, cell_size, "gap")
    if strip + 2 * slot >= cells_1 - 2 or substrate >= pec.shape[2] - 1:
        raise ConfigurationError("coplanar_section: the strip and its gaps must fit inside the box")
    low = (cells_1 - strip) // 2
    _strip(pec, low, low + strip, substrate)
    _strip(pec, 0, low - slot, substrate)
    _strip(pec, low + strip + slot, cells_1 - 1, substrate)
    pec[1, cells_1 - 1, substrate] = True  # the last edge, to the far wall
    return eps, torch.from_numpy(pec)


def coax_section(inner_radius, outer_radius, permittivity, cell_size):
    """A coaxial line: ``(permittivity, conductor)`` tensors of a square cross-section just holding the
    outer conductor's inner surface (radius ``outer_radius``), centred on a node.

    Metal nodes are those within ``inner_radius`` of the centre or beyond ``outer_radius``; an E edge
    is pinned when both its ends are metal. The staircase moves each surface by a fraction of a cell:
    ``Z0`` converges at first order in ``cell_size / inner_radius`` (about 1 % at 20 cells per radius).
    """
    if not 0 < inner_radius < outer_radius:
        raise ConfigurationError(
            f"coax_section: need 0 < inner_radius < outer_radius (m), got {inner_radius!r}, {outer_radius!r}"
        )
    half = math.ceil(outer_radius / cell_size) + 1
    cells = 2 * half
    offsets = (np.arange(cells) - half) * cell_size
    radius = np.hypot(offsets[:, None], offsets[None, :])
    nodes = (radius <= inner_radius) | (radius >= outer_radius)
    pec = np.stack([nodes, nodes & np.roll(nodes, -1, axis=0), nodes & np.roll(nodes, -1, axis=1)])
    pec[1, -1, :] = nodes[-1, :]  # the edges to the far walls (metal there)
    pec[2, :, -1] = nodes[:, -1]
    eps = torch.full((cells, cells), float(permittivity), dtype=torch.float64)
    return eps, torch.from_numpy(pec)


def microstrip_static(width, height, permittivity):
    """``(Z0 (ohm), eps_eff)`` of a zero-thickness microstrip at zero frequency (Hammerstad & Jensen)."""
    u, eps_r = width / height, permittivity
    f = 6 + (2 * math.pi - 6) * math.exp(-((30.666 / u) ** 0.7528))
    z_air = VACUUM_IMPEDANCE / (2 * math.pi) * math.log(f / u + math.sqrt(1 + (2 / u) ** 2))
    a = 1 + math.log((u**4 + (u / 52) ** 2) / (u**4 + 0.432)) / 49 + math.log(1 + (u / 18.1) ** 3) / 18.7
    b = 0.564 * ((eps_r - 0.9) / (eps_r + 3)) ** 0.053
    eps_eff = (eps_r + 1) / 2 + (eps_r - 1) / 2 * (1 + 10 / u) ** (-a * b)
    return z_air / math.sqrt(eps_eff), eps_eff


def microstrip_dispersive(width, height, permittivity, frequency):
    """``(Z0 (ohm), eps_eff)`` of a zero-thickness microstrip at ``frequency`` (Hz): Kirschning & Jansen's
    ``eps_eff(f)`` and Jansen & Kirschning's power-current ``Z0(f)`` on Hammerstad & Jensen's statics."""
    u, eps_r = width / height, permittivity
    z_static, eps_static = microstrip_static(width, height, permittivity)
    fn = frequency * height * 1e-6  # GHz mm
    p1 = 0.27488 + (0.6315 + 0.525 / (1 + 0.0157 * fn) ** 20) * u - 0.065683 * math.exp(-8.7513 * u)
    p2 = 0.33622 * (1 - math.exp(-0.03442 * eps_r))
    p3 = 0.0363 * math.exp(-4.6 * u) * (1 - math.exp(-((fn / 38.7) ** 4.97)))
    p4 = 1 + 2.751 * (1 - math.exp(-((eps_r / 15.916) ** 8)))
    p = p1 * p2 * ((0.1844 + p3 * p4) * fn) ** 1.5763
    eps_eff = eps_r - (eps_r - eps_static) / (1 + p)
    r1 = 0.03891 * eps_r**1.4
    r2 = 0.267 * u**7
    r3 = 4.766 * math.exp(-3.228 * u**0.641)
    r4 = 0.016 + (0.0514 * eps_r) ** 4.524
    r5 = (fn / 28.843) ** 12
    r6 = 22.2 * u**1.92
    r7 = 1.206 - 0.3144 * math.exp(-r1) * (1 - math.exp(-r2))
    r8 = 1 + 1.275 * (1 - math.exp(-0.004625 * r3 * eps_r**1.674 * (fn / 18.365) ** 2.745))
    r9 = (5.086 * r4 * r5 / (0.3838 + 0.386 * r4) * math.exp(-r6) / (1 + 1.2992 * r5)
          * (eps_r - 1) ** 6 / (1 + 10 * (eps_r - 1) ** 6))
    r10 = 0.00044 * eps_r**2.136 + 0.0184
    r11 = (fn / 19.47) ** 6 / (1 + 0.0962 * (fn / 19.47) ** 6)
    r12 = 1 / (1 + 0.00245 * u**2)
    r13 = 0.9408 * eps_eff**r8 - 0.9603
    r14 = (0.9408 - r9) * eps_static**r8 - 0.9603
    r15 = 0.707 * r10 * (fn / 12.3) ** 1.097
    r16 = 1 + 0.0503 * eps_r**2 * r11 * (1 - math.exp(-((u / 15) ** 6)))
    r17 = r7 * (1 - 1.1241 * r12 / r16 * math.exp(-0.026 * fn**1.15656 - r15))
    return z_static * (r13 / r14) ** r17, eps_eff


def _elliptic_ratio(k):
    """``K(k) / K(k')`` with ``k' = sqrt(1 - k^2)`` (scipy's ``ellipk`` takes ``m = k^2``)."""
    return scipy.special.ellipk(k**2) / scipy.special.ellipk(1 - k**2)


def coplanar_backed(width, gap, height, permittivity):
    """``(Z0 (ohm), eps_eff)`` of a conductor-backed coplanar waveguide, zero-thickness conductors,
    infinitely wide coplanar grounds, open above (conformal mapping)::

        k = w / (w + 2 g),  k3 = tanh(pi w / 4h) / tanh(pi (w + 2 g) / 4h)
        eps_eff = (1 + eps_r q) / (1 + q),  q = [K(k3) / K(k3')] / [K(k) / K(k')]
        Z0 = 60 pi / sqrt(eps_eff) / (K(k) / K(k') + K(k3) / K(k3'))
    """
    k = width / (width + 2 * gap)
    k3 = math.tanh(math.pi * width / (4 * height)) / math.tanh(math.pi * (width + 2 * gap) / (4 * height))
    air, backed = _elliptic_ratio(k), _elliptic_ratio(k3)
    q = backed / air
    eps_eff = (1 + permittivity * q) / (1 + q)
    return VACUUM_IMPEDANCE / 2 / math.sqrt(eps_eff) / (air + backed), eps_eff


def coax_impedance(inner_radius, outer_radius, permittivity):
    """``Z0 = eta0 / (2 pi sqrt(eps_r)) ln(b / a)`` (ohm) of a coaxial line (Pozar, eq. 2.32)."""
    return VACUUM_IMPEDANCE / (2 * math.pi * math.sqrt(permittivity)) * math.log(outer_radius / inner_radius)


def microstrip_open_end(width, height, permittivity, effective_permittivity=None):
    """``delta_l`` (m): the extra length of line equivalent to the fringing capacitance of a microstrip's
    open end (Kirschning, Jansen & Koster 1981, the formula of Qucs's ``MOPEN``; zero-thickness strip).
    ``effective_permittivity`` defaults to Hammerstad & Jensen's static one
    (:func:`microstrip_static`); pass a solver's to follow it.
    """
    u, eps_r = width / height, permittivity
    eps = effective_permittivity
    if eps is None:
        eps = microstrip_static(width, height, permittivity)[1]
    q1 = 0.434907 * (eps**0.81 + 0.26) / (eps**0.81 - 0.189) * (u**0.8544 + 0.236) / (u**0.8544 + 0.87)
    q2 = 1 + u**0.371 / (2.358 * eps_r + 1)
    q3 = 1 + 0.5274 * math.atan(0.084 * u ** (1.9413 / q2)) / eps**0.9236
    q4 = 1 + 0.0377 * math.atan(0.067 * u**1.456) * (6 - 5 * math.exp(0.036 * (1 - eps_r)))
    q5 = 1 - 0.218 * math.exp(-7.5 * u)
    return height * q1 * q3 * q5 / q4


def microstrip_tee_stub_offset(width, stub_width, height, permittivity, frequency):
    """``d2`` (m): how far from the main line's centre line a symmetric microstrip T-junction's side arm
    (a shunt stub) effectively starts, Hammerstad's model (as Qucs's ``MTEE``)::

        D = eta0 h / (Z0 sqrt(eps_eff))         (equivalent parallel-plate width of the main line)
        r = Z0_main / Z0_stub,  q = (f / fp)^2,  fp = 0.4 Z0_main / h  (GHz, h in mm)
        d2 = D (0.5 - r (0.05 + 0.7 exp(-1.6 r) + 0.25 r q - 0.17 ln r))

    with Kirschning-Jansen's ``Z0`` and ``eps_eff`` (:func:`microstrip_dispersive`). An ideal-line model of
    a stub of physical length ``L`` from the main line's edge, open at its end, is then a line of length
    ``L + width / 2 - d2 + delta_l`` (:func:`microstrip_open_end`) from the junction's centre; for wide
    lines ``d2`` exceeds ``width / 2`` (the stub starts past the main line's edge).

    Args:
        width: the main line's width (m); stub_width: the stub's (m); height: the substrate's (m).
        permittivity: the substrate's relative permittivity. frequency: Hz.
    """
    z_main, eps_main = microstrip_dispersive(width, height, permittivity, frequency)
    z_stub = microstrip_dispersive(stub_width, height, permittivity, frequency)[0]
    plate = VACUUM_IMPEDANCE * height / (z_main * math.sqrt(eps_main))
    cutoff = 0.4e6 * z_main / height  # Hz, the main line's first higher-order mode
    r, q = z_main / z_stub, (frequency / cutoff) ** 2
    return plate * (0.5 - r * (0.05 + 0.7 * math.exp(-1.6 * r) + 0.25 * r * q - 0.17 * math.log(r)))
