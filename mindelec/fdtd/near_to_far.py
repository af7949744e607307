"""Near-to-far-field transform (3D): radiation patterns, directivity, gain and efficiency.

:class:`NearToFarMonitor` records the DFTs of the tangential fields on a closed box (the surface of
:class:`~mindelec.fdtd.FluxBox`, each face cell once). From them, on the face cell centres ``r'``, the
equivalent surface currents ``J = n x H`` and ``M = -n x E`` give the radiation vectors (Balanis,
*Antenna Theory*, ch. 12; the DFT's ``exp(-i omega t)`` makes these ``exp(+j omega t)`` phasors)

    N(theta, phi) = sum J exp(i k r_hat . r') dA,    L(theta, phi) = sum M exp(i k r_hat . r') dA,

and the far field ``E = exp(-i k r) / r * (E_theta, E_phi)`` with

    E_theta = -i k / (4 pi) (L_phi + eta N_theta),    E_phi = i k / (4 pi) (L_theta - eta N_phi)

in V (``r E``). The medium outside the box is vacuum (``eta = eta0``, ``k = 2 pi f / c``). The radiation
intensity is ``U = (|E_theta|^2 + |E_phi|^2) / eta`` (W/sr per Hz^2 for a pulse), in the convention of
:class:`~mindelec.fdtd.FluxMonitor` (no factor 1/2: spectral densities of the DFT fields, the energy being
``2 integral_0^inf df``), so ``radiated_power = oint U dOmega`` compares directly with a flux monitor's
``flux``, and an ``accepted_power`` for :meth:`NearToFarResult.gain` must be given in the same
convention (e.g. ``Re(V(f) conj(I(f)))`` of a port's DFT voltage and current, or a flux into the antenna).

Over an infinite PEC ground plane (a monopole, an antenna on a large ground; the plane crossing the whole
domain, PML included), :meth:`NearToFarResult.over_ground` adds the images of the box's currents (image
theory, Balanis ch. 4.7: across the plane an electric current keeps its normal component and reverses its
tangential ones, a magnetic current the opposite) and gives the far field of the half-space above the plane:
zero below it, the radiated power integrated over the half-space only (half the sphere's integral of the
mirror-symmetric field). The box may reach the plane or cross it: the fields under the plane are zero, and
on the plane ``M = 0`` while the tangential ``J`` cancels against its image.
"""

import math
import operator

import numpy as np
import torch

from common.errors import ConfigurationError, DataError
from common.units import SPEED_OF_LIGHT, VACUUM_IMPEDANCE

from .flux_box import FluxBox, surface_flux
from .grid import AXES

#: frequency-by-angle-by-surface-point phases computed at once (bounds the memory of a pattern)
CHUNK = 2**22


class NearToFarMonitor(FluxBox):
    """Far-field patterns from the fields on a closed box around the radiator (3D, vacuum outside).

    ``result[name]`` is a :class:`NearToFarResult`. The box should enclose every source and structure that
    radiates and lie outside the PML; it sits on the integer nodes nearest to ``center +- size/2``.

    Args:
        name: key of the result.
        frequencies: (Hz), finite and >= 0.
        center: (m), 3 coordinates.
        size: (m), 3 positive extents.
    """

    def check_medium(self, medium):
        """Refuse a default medium other than vacuum (the transform assumes vacuum outside the box)."""
        values = [getattr(medium, name) for name in ("permittivity", "conductivity", "permeability")]
        if medium._pole() is not None or [v if isinstance(v, float) else None for v in values] != [
            1.0,
            0.0,
            1.0,
        ]:
            raise ConfigurationError(
                f"{self!r}: the simulation's default medium must be vacuum, got {medium!r}"
            )

    def surface(self, grid, polarization):
        if grid.ndim != 3:
            raise ConfigurationError(f"{self!r}: the near-to-far-field transform needs a 3D simulation")
        return super().surface(grid, polarization)

    def _output(self, surface, faces):
        device = next(iter(next(iter(faces.values())).values())).device
        frequencies = self.frequencies.to(device)
        flux = surface_flux(surface, faces)
        positions, currents_j, currents_m, areas = [], [], [], []
        for face in surface.faces:
            fields = faces[face.label]
            template = next(iter(fields.values()))
            centres = surface.centres(face, template.real.dtype, device)
            normal = torch.zeros(3, dtype=template.dtype, device=device)
            normal[face.axis] = face.sign
            vectors = {}
            for kind in "EH":
                vectors[kind] = torch.stack(
                    [
                        fields.get(kind + AXES[a], torch.zeros_like(template)).reshape(len(frequencies), -1)
                        for a in range(3)
                    ],
                    dim=-1,
                )  # (F, P, 3)
            currents_j.append(torch.linalg.cross(normal.expand_as(vectors["H"]), vectors["H"]))
            currents_m.append(-torch.linalg.cross(normal.expand_as(vectors["E"]), vectors["E"]))
            positions.append(centres)
            areas.append(
                torch.full((len(centres),), surface.cell_area(face), dtype=centres.dtype, device=device)
            )
        return NearToFarResult(
            frequencies=frequencies,
            positions=torch.cat(positions),
            areas=torch.cat(areas),
            electric_current=torch.cat(currents_j, dim=1),
            magnetic_current=torch.cat(currents_m, dim=1),
            flux=flux,
        )


def _sphere_quadrature(results):
    """Gauss-Legendre in cos(theta) times uniform phi, fine enough for the largest surface's electrical
    size: ``(theta (T, 1), phi (1, 2T), weights (T, 1))``, the weights summing to 4 pi."""
    positions = results[0]["positions"]
    radius = max(float(result["positions"].norm(dim=1).max()) for result in results)
    frequency = max(float(result["frequencies"].max()) for result in results)
    count = max(32, math.ceil(2 * (2 * math.pi * frequency / SPEED_OF_LIGHT) * radius) + 16)
    nodes, weights = np.polynomial.legendre.leggauss(count)
    real = positions.dtype
    theta = torch.as_tensor(np.arccos(nodes), dtype=real, device=positions.device)
    phi = torch.arange(2 * count, dtype=real, device=positions.device) * (math.pi / count)
    weights = torch.as_tensor(weights, dtype=real, device=positions.device) * (math.pi / count)
    return theta[:, None], phi[None, :], weights[:, None]


def radiation_overlaps(results):
    """The overlaps of far fields over the sphere: ``R[f, k, l] = oint E_k . conj(E_l) dOmega / eta0``.

    The diagonal is each result's radiated power; the off-diagonal terms are what the envelope correlation
    of antennas is made of (:mod:`mindelec.diversity`). Over a ground plane
    (:meth:`NearToFarResult.over_ground`) the integral covers the half-space above it.

    Args:
        results: ``N`` :class:`NearToFarResult` of the same frequencies and the same ground (or none), e.g.
            one monitor's far field in ``N`` runs of one structure.

    Returns:
        (F, N, N) complex Hermitian tensor, W (per Hz^2 for a pulse), in the convention of the module
        docstring; the quadrature (Gauss-Legendre in cos theta, uniform in phi) is fine enough for the
        largest surface's electrical size.

    Raises:
        ConfigurationError: for no result, or results of other frequencies or another ground than the first's.
    """
    results = list(results)
    if not results:
        raise ConfigurationError("radiation_overlaps: give at least one NearToFarResult")
    first = results[0]
    for index, result in enumerate(results):
        if not torch.equal(result["frequencies"], first["frequencies"]) or result.ground != first.ground:
            raise ConfigurationError(
                f"radiation_overlaps: result {index} has other frequencies or another ground plane than "
                f"result 0 ({result['frequencies'].tolist()} Hz, ground {result.ground}; result 0: "
                f"{first['frequencies'].tolist()} Hz, ground {first.ground})"
            )
    theta, phi, weights = _sphere_quadrature(results)
    # the fields (F, N, T * 2T * 2): E_theta and E_phi of each result on the quadrature's directions
    fields = torch.stack([torch.stack(result._radiation(theta, phi), -1) for result in results], 1).flatten(2)
    area = weights.expand(theta.shape[0], phi.shape[1])[..., None].expand(-1, -1, 2).reshape(-1)
    overlaps = (fields * area.to(fields.dtype)) @ fields.conj().transpose(1, 2) / VACUUM_IMPEDANCE
    return overlaps if first.ground is None else overlaps / 2  # the half-space of a mirror-symmetric field


def _directions(theta, phi):
    """Unit vectors ``r_hat, theta_hat, phi_hat`` (A, 3) of flattened angles (rad)."""
    sin_t, cos_t, sin_p, cos_p = torch.sin(theta), torch.cos(theta), torch.sin(phi), torch.cos(phi)
    r_hat = torch.stack([sin_t * cos_p, sin_t * sin_p, cos_t], dim=-1)
    theta_hat = torch.stack([cos_t * cos_p, cos_t * sin_p, -sin_t], dim=-1)
    phi_hat = torch.stack([-sin_p, cos_p, torch.zeros_like(phi)], dim=-1)
    return r_hat, theta_hat, phi_hat


class NearToFarResult(dict):
    """The near-to-far-field transform of one run (a dict of its tensors, with methods).

    Keys (tensors): ``"frequencies"`` (F,) Hz; ``"positions"`` (P, 3) m, the surface cell centres;
    ``"areas"`` (P,) m^2; ``"electric_current"`` ``J = n x H`` and ``"magnetic_current"`` ``M = -n x E``,
    (F, P, 3) complex (A/m and V/m per Hz); ``"flux"`` (F,) the outward flux through the surface.

    Angles are in radians: ``theta`` from +z, ``phi`` from +x in the xy plane; ``theta`` and ``phi``
    broadcast against each other to a shape ``S``. ``ground`` is ``None`` (free space) or the ``(axis index,
    position in m)`` of the PEC ground plane of :meth:`over_ground`.
    """

    def __init__(self, frequencies, positions, areas, electric_current, magnetic_current, flux, ground=None):
        self.ground = ground  # (axis index, position in m) of a PEC ground plane, or None (free space)
        super().__init__(
            frequencies=frequencies,
            positions=positions,
            areas=areas,
            electric_current=electric_current,
            magnetic_current=magnetic_current,
            flux=flux,
        )

    def _angles(self, theta, phi):
        real = self["positions"].dtype
        theta, phi = torch.broadcast_tensors(
            torch.as_tensor(theta, dtype=real, device=self["positions"].device),
            torch.as_tensor(phi, dtype=real, device=self["positions"].device),
        )
        if not bool(torch.isfinite(theta).all() & torch.isfinite(phi).all()):
            raise DataError("NearToFarResult: theta and phi must be finite angles (rad)")
        return theta, phi

    def over_ground(self, position=0.0, axis="z"):
        """The far field over an infinite PEC ground plane ``axis = position`` with the radiator above it.

        Args:
            position: the plane's coordinate along ``axis`` (m); the box's faces must not lie below it
                except where the fields are zero (under a plane that crosses the whole domain).
            axis: ``"x"``, ``"y"`` or ``"z"``, the plane's normal; the half-space ``axis > position``.

        Returns:
            a :class:`NearToFarResult` holding the box's currents and their images (see the module
            docstring): its pattern is zero below the plane, its radiated power that of the half-space.

        Raises:
            ConfigurationError: for an unknown axis, a non-finite position, or a result already over a ground.
        """
        owner = "NearToFarResult.over_ground"
        if axis not in AXES:
            raise ConfigurationError(f"{owner}: axis must be 'x', 'y' or 'z', got {axis!r}")
        position = float(position)
        if not math.isfinite(position):
            raise ConfigurationError(f"{owner}: position must be finite (m), got {position}")
        if self.ground is not None:
            raise ConfigurationError(f"{owner}: this result is already over a ground plane")
        index = AXES.index(axis)
        flip = torch.ones(3, dtype=self["positions"].dtype, device=self["positions"].device)
        flip[index] = -1.0
        mirrored = self["positions"] * flip
        mirrored[:, index] += 2 * position
        return NearToFarResult(
            frequencies=self["frequencies"],
            positions=torch.cat([self["positions"], mirrored]),
            areas=torch.cat([self["areas"], self["areas"]]),
            electric_current=torch.cat([self["electric_current"], -self["electric_current"] * flip], dim=1),
            magnetic_current=torch.cat([self["magnetic_current"], self["magnetic_current"] * flip], dim=1),
            flux=self["flux"],
            ground=(index, position),
        )

    def at_frequency(self, index):
        """The result at one of its frequencies (``index`` into ``"frequencies"``), as a one-frequency
        :class:`NearToFarResult` (the same ground): its patterns, directivity and power cost ``1 / F`` of
        this result's.

        Raises:
            ConfigurationError: for an index outside ``[-F, F)``.
        """
        count = len(self["frequencies"])
        try:
            position = operator.index(index)  # Python, NumPy and 0-d torch integers
        except TypeError:
            position = None
        if position is None or not -count <= position < count:
            raise ConfigurationError(
                f"NearToFarResult.at_frequency: index must be an integer in [-{count}, {count}), "
                f"got {index!r}"
            )
        one = slice(position % count, position % count + 1)
        return NearToFarResult(
            frequencies=self["frequencies"][one],
            positions=self["positions"],
            areas=self["areas"],
            electric_current=self["electric_current"][one],
            magnetic_current=self["magnetic_current"][one],
            flux=self["flux"][one],
            ground=self.ground,
        )

    def pattern(self, theta, phi):
        """The far field ``r E`` (V; per Hz for a pulse) as ``(E_theta, E_phi)``, each ``(F, *S)`` complex;
        zero below a ground plane (:meth:`over_ground`)."""
        return self._above_ground(theta, phi, *self._radiation(theta, phi))

    def _above_ground(self, theta, phi, e_theta, e_phi):
        """The far field ``(E_theta, E_phi)`` with the directions below the ground plane (if any) zeroed."""
        if self.ground is None:
            return e_theta, e_phi
        theta, phi = self._angles(theta, phi)
        above = _directions(theta, phi)[0][..., self.ground[0]] >= 0
        return e_theta * above, e_phi * above

    def _radiation(self, theta, phi):
        """The far field of the surface currents (and images) in every direction, ground or not."""
        theta, phi = self._angles(theta, phi)
        shape = theta.shape
        r_hat, theta_hat, phi_hat = _directions(theta.reshape(-1), phi.reshape(-1))
        weighted_j = self["electric_current"] * self["areas"][None, :, None]
        weighted_m = self["magnetic_current"] * self["areas"][None, :, None]
        complex_dtype = weighted_j.dtype
        wavenumbers = 2 * math.pi * self["frequencies"] / SPEED_OF_LIGHT
        chunk = max(1, CHUNK // (len(self["positions"]) * len(self["frequencies"])))
        e_theta, e_phi = [], []
        for start in range(0, len(r_hat), chunk):
            directions = r_hat[start : start + chunk]
            projection = directions @ self["positions"].T  # (A, P) m
            phase = torch.polar(
                torch.ones_like(projection)[None],
                wavenumbers.to(projection.dtype)[:, None, None] * projection[None],
            ).to(complex_dtype)  # (F, A, P)
            radiation_n = phase @ weighted_j  # (F, A, 3)
            radiation_l = phase @ weighted_m
            t_hat = theta_hat[start : start + chunk].to(complex_dtype)
            p_hat = phi_hat[start : start + chunk].to(complex_dtype)
            n_theta, n_phi = (radiation_n * t_hat).sum(-1), (radiation_n * p_hat).sum(-1)
            l_theta, l_phi = (radiation_l * t_hat).sum(-1), (radiation_l * p_hat).sum(-1)
            factor = (1j * wavenumbers / (4 * math.pi)).to(complex_dtype)[:, None]
            e_theta.append(-factor * (l_phi + VACUUM_IMPEDANCE * n_theta))
            e_phi.append(factor * (l_theta - VACUUM_IMPEDANCE * n_phi))
        count = len(self["frequencies"])
        return torch.cat(e_theta, 1).reshape(count, *shape), torch.cat(e_phi, 1).reshape(count, *shape)

    def intensity(self, theta, phi):
        """Radiation intensity ``U = |r E|^2 / eta0`` (W/sr; per Hz^2 for a pulse), ``(F, *S)``."""
        e_theta, e_phi = self.pattern(theta, phi)
        return (e_theta.abs() ** 2 + e_phi.abs() ** 2) / VACUUM_IMPEDANCE

    @property
    def radiated_power(self):
        """``oint U dOmega`` (F,) in W (per Hz^2 for a pulse): the power reaching the far field."""
        return radiation_overlaps([self])[:, 0, 0].real

    def power_and_peak(self):
        """``(radiated power (F,) W, largest intensity (F,) W/sr)`` (per Hz^2 for a pulse) over the
        radiated-power quadrature, from one evaluation of the far field on it: what
        :attr:`radiated_power` and :meth:`directivity` (``4 pi peak / power``) each evaluate, for a caller
        who wants both (on a large surface the far field is the costly part). As
        :func:`radiation_overlaps`, over a ground plane the sphere's integral is halved, the field below
        the plane being the mirror of the field above."""
        theta, phi, weights = _sphere_quadrature([self])
        e_theta, e_phi = self._radiation(theta, phi)
        intensity = (e_theta.abs() ** 2 + e_phi.abs() ** 2) / VACUUM_IMPEDANCE  # (F, T, 2T)
        power = (intensity * weights).sum(dim=(1, 2))
        return (power if self.ground is None else power / 2), intensity.amax(dim=(1, 2))

    def directivity(self, theta=None, phi=None):
        """``D = 4 pi U / P_rad``: ``(F, *S)`` at the angles, or (F,) its maximum when no angles are given
        (found on the radiated-power quadrature grid, refined by nothing: within its angular step)."""
        if theta is None and phi is None:
            power, peak = self.power_and_peak()
            self._check_power(power, "the radiated power")
            return 4 * math.pi * peak / power
        power = self.radiated_power
        self._check_power(power, "the radiated power")
        intensity = self.intensity(
            theta if theta is not None else math.pi / 2, phi if phi is not None else 0.0
        )
        return 4 * math.pi * intensity / power.reshape(-1, *([1] * (intensity.dim() - 1)))

    def _check_power(self, power, what):
        if not bool((power > 0).all()):
            raise DataError(f"NearToFarResult: {what} is not positive at every frequency: {power.tolist()}")

    def _accepted(self, accepted_power):
        accepted = torch.as_tensor(
            accepted_power, dtype=self["positions"].dtype, device=self["positions"].device
        )
        accepted = accepted.expand(len(self["frequencies"])) if accepted.dim() == 0 else accepted
        if accepted.shape != self["frequencies"].shape:
            raise ConfigurationError(
                f"NearToFarResult: accepted_power must be a scalar or hold one value per frequency "
                f"({len(self['frequencies'])}), got shape {tuple(accepted.shape)}"
            )
        self._check_power(accepted, "accepted_power")
        return accepted

    def efficiency(self, accepted_power):
        """Radiation efficiency ``P_rad / P_accepted`` (F,); ``accepted_power`` (F,) or scalar, in the
        convention of the module docstring."""
        return self.radiated_power / self._accepted(accepted_power)

    def gain(self, accepted_power, theta=None, phi=None):
        """``G = 4 pi U / P_accepted = efficiency * D``: ``(F, *S)`` at the angles, or (F,) its maximum."""
        accepted = self._accepted(accepted_power)
        if theta is None and phi is None:
            return 4 * math.pi * self.power_and_peak()[1] / accepted
        intensity = self.intensity(
            theta if theta is not None else math.pi / 2, phi if phi is not None else 0.0
        )
        return 4 * math.pi * intensity / accepted.reshape(-1, *([1] * (intensity.dim() - 1)))

    def plot_polar(self, phi=None, theta=None, frequency_index=0, decibels=True, points=361, ax=None):
        """Polar cut of the directivity (dBi, or linear with ``decibels=False``) with matplotlib.

        Give ``phi`` (rad) for an elevation cut (theta over 0 .. 2 pi, the far side of the cut drawn at
        ``phi + pi``) or ``theta`` for an azimuthal cut (phi over 0 .. 2 pi); default the elevation cut
        ``phi = 0``. Returns the polar axes.
        """
        import matplotlib.pyplot as plt

        if phi is not None and theta is not None:
            raise ConfigurationError(
                "NearToFarResult.plot_polar: give phi (elevation cut) or theta, not both"
            )
        single = self.at_frequency(frequency_index)
        sweep = torch.linspace(0, 2 * math.pi, points, dtype=self["positions"].dtype)
        if theta is None:
            phi = 0.0 if phi is None else float(phi)
            # theta > pi continues the cut on the other side: (2 pi - theta, phi + pi)
            folded = torch.where(sweep <= math.pi, sweep, 2 * math.pi - sweep)
            directivity = single.directivity(folded, torch.where(sweep <= math.pi, phi, phi + math.pi))
            label = f"phi = {math.degrees(phi):.0f} deg"
        else:
            directivity = single.directivity(torch.full_like(sweep, float(theta)), sweep)
            label = f"theta = {math.degrees(float(theta)):.0f} deg"
        values = directivity[0].detach().cpu()
        if decibels:
            values = 10 * torch.log10(values.clamp_min(1e-12))
            values = values.clamp_min(float(values.max()) - 40)
        if ax is None:
            _, ax = plt.subplots(subplot_kw={"projection": "polar"})
        ax.plot(sweep.numpy(), values.numpy(), label=label)
        if theta is None:
            ax.set_theta_zero_location("N")
            ax.set_theta_direction(-1)
        frequency = float(self["frequencies"][frequency_index])
        ax.set_title(f"directivity ({'dBi' if decibels else 'linear'}) at {frequency:.4g} Hz")
        ax.legend(loc="lower left")
        return ax

    def plot_3d(self, frequency_index=0, points=(61, 121), ax=None):
        """The 3D pattern: a surface at radius ``D(theta, phi)`` (linear directivity), with matplotlib.
        Returns the 3D axes."""
        import matplotlib.pyplot as plt

        real = self["positions"].dtype
        theta = torch.linspace(0, math.pi, points[0], dtype=real)[:, None]
        phi = torch.linspace(0, 2 * math.pi, points[1], dtype=real)[None, :]
        radius = self.at_frequency(frequency_index).directivity(theta, phi)[0].detach().cpu()
        r_hat, _, _ = _directions(*torch.broadcast_tensors(theta, phi))
        xyz = (radius[..., None] * r_hat).numpy()
        if ax is None:
            ax = plt.figure().add_subplot(projection="3d")
        colours = plt.cm.viridis((radius / radius.max()).numpy())
        ax.plot_surface(xyz[..., 0], xyz[..., 1], xyz[..., 2], facecolors=colours, linewidth=0)
        ax.set_xlabel("x")
        ax.set_ylabel("y")
        ax.set_zlabel("z")
        ax.set_title(f"directivity at {float(self['frequencies'][frequency_index]):.4g} Hz")
        return ax
