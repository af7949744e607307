"""Parameter-sweep samples for datasets: S-parameters of a parameterised 2D structure by FDTD.

The structure (:func:`mindelec.devices.waveguide_obstacle`) is a parallel-plate waveguide in 2D TM
(Ez, Hx, Hy): PEC walls at ``y = +-height/2``, PML at both ends along x, a dielectric block of
``length`` (along x) and relative ``permittivity``, centred at ``x = 0``, filling the guide's height
(default) or a ``width`` up from the lower wall. A full-height block is a Fabry-Perot resonator for
the TM1 mode (smooth, low-Q responses, an analytic S11); a partial one couples TM1 to modes trapped
in the block (sharp Fano resonances that ring long: give ``until``). The guide is
single-mode between the TM1 cut-off ``c / (2 height)`` and the TM2 cut-off ``c / height``; the
default band, 9.5-14 GHz for a 20 mm guide, lies inside (cut-offs 7.5 and 15 GHz). Ports project
Ez on the TM1 profile ``sin(pi (y + height/2) / height)`` at ``x = +-port_offset``; S11 and S21 come
from a reference run (empty guide, cached per set of options) and the device run
(:func:`mindelec.ports.s_parameters`). The block is mirror symmetric in x, so ``S22 = S11`` and
``S12 = S21`` (reciprocity): the full 2-port matrix follows from one source port.

:func:`sparameter_sample` is the dataset-generator contract (``common.datasets`` recipes name it
``"mindelec.sweeps:sparameter_sample"``); :func:`field_sample` gives the permittivity map and the
frequency-domain Ez field of the same structure for field surrogates.

Example:
    >>> sample = sparameter_sample({"length": 15e-3, "permittivity": 3.0}, seed=0)   # doctest: +SKIP
    >>> sorted(sample)                                                         # doctest: +SKIP
    ['frequencies', 's11_db', 's11_imag', 's11_real', 's21_imag', 's21_real']
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from common import checks
from common.deprecation import renamed_arguments, warn_deprecated
from common.errors import ArgumentTypeError, ConfigurationError, UnknownNameError
from common.units import SPEED_OF_LIGHT

__all__ = [
    "WaveguideSetup",
    "sparameter_sample",
    "field_sample",
    "s_matrix_from_sample",
    "block_s_parameters",
    "SAMPLE_KEYS",
]

#: the keys of every :func:`sparameter_sample` result
SAMPLE_KEYS = ("frequencies", "s11_real", "s11_imag", "s21_real", "s21_imag", "s11_db")

_PARAMETERS = ("length", "permittivity", "width")
FWIDTH_FRACTION = 0.5  # pulse width / band width: little content below the TM1 cut-off


class WaveguideSetup:
    """The fixed part of the sweep: guide, grid, band, source and ports (everything but the block).

    Args:
        height: guide height (m), distance between the PEC walls.
        guide_length: domain length along x (m), PML included.
        cell_size: cell size (m) of the FDTD grid (``resolution=``, the old name, warns and still
            works for one release; so does reading the attribute ``resolution``).
        f_min, f_max: band edges (Hz); must lie between the TM1 and TM2 cut-offs.
        n_frequencies: number of frequencies of the (fixed, linear) axis.
        pml: PML thickness (cells).
        port_offset: ports at ``x = -port_offset`` (source side) and ``+port_offset`` (m).
        until: simulated time (s); default long enough for the slowest band frequency to cross the
            guide twice after the pulse.
        dtype: ``torch.float32`` or ``torch.float64``.

    Raises:
        ValueError: for a band outside the single-mode range or ports outside the domain.
    """

    @renamed_arguments(resolution="cell_size")
    def __init__(
        self,
        height=20e-3,
        guide_length=200e-3,
        cell_size=1e-3,
        f_min=9.5e9,
        f_max=14e9,
        n_frequencies=26,
        pml=15,
        port_offset=55e-3,
        until=None,
        dtype=torch.float32,
    ):
        self.height = checks.positive(height, "WaveguideSetup: height (m)")
        self.guide_length = checks.positive(guide_length, "WaveguideSetup: guide_length (m)")
        self.cell_size = checks.positive(cell_size, "WaveguideSetup: cell_size (m)")
        f_min = checks.positive(f_min, "WaveguideSetup: f_min (Hz)")
        f_max = checks.positive(f_max, "WaveguideSetup: f_max (Hz)")
        n_frequencies = checks.positive_int(n_frequencies, "WaveguideSetup: n_frequencies")
        pml = checks.non_negative_int(pml, "WaveguideSetup: pml (cells)")
        port_offset = checks.positive(port_offset, "WaveguideSetup: port_offset (m)")
        cutoff_1, cutoff_2 = SPEED_OF_LIGHT / (2 * self.height), SPEED_OF_LIGHT / self.height
        if not cutoff_1 < f_min < f_max < cutoff_2:
            raise ConfigurationError(
                f"WaveguideSetup: band f_min={f_min:.4g} Hz .. f_max={f_max:.4g} Hz must lie inside the "
                f"single-mode range ({cutoff_1:.4g} Hz, {cutoff_2:.4g} Hz) of a {self.height} m guide"
            )
        if not 0 < port_offset < self.guide_length / 2 - (pml + 2) * self.cell_size:
            raise ConfigurationError(
                f"WaveguideSetup: port_offset={port_offset} m must lie inside the domain, "
                f"outside the PML ({pml} cells of {self.cell_size} m)"
            )
        self.frequencies = torch.linspace(float(f_min), float(f_max), int(n_frequencies), dtype=torch.float64)
        self.pml, self.port_offset, self.dtype = int(pml), float(port_offset), dtype
        self.source_x = -self.port_offset - 0.25 * (self.guide_length / 2 - self.port_offset)
        slowest = SPEED_OF_LIGHT * math.sqrt(1 - (cutoff_1 / f_min) ** 2)
        self.waveform = _pulse(f_min, f_max)
        self.until = (
            self.waveform.duration + 3 * self.guide_length / slowest if until is None else float(until)
        )

    @property
    def resolution(self) -> float:
        """Deprecated: the cell size (m), :attr:`cell_size`."""
        warn_deprecated("WaveguideSetup.resolution", "WaveguideSetup.cell_size")
        return self.cell_size

    @property
    def size(self) -> tuple[float, float]:
        """Domain extent (m): (guide_length, height)."""
        return (self.guide_length, self.height)

    def ports(self):
        """The two :class:`mindelec.ports.WaveguidePort` objects, projecting on the TM1 profile."""
        from mindelec import fdtd, ports

        grid = fdtd.Grid(self.size, self.cell_size)
        y_slice = grid.index_range((0.0, 0.0), (0.0, self.height), "Ez", "port")[1]
        y_nodes = grid.coordinates("Ez", 1)[y_slice]
        profile = torch.sin(math.pi * (y_nodes + self.height / 2) / self.height)
        return [
            ports.WaveguidePort(name, (x, 0.0), axis="x", span=self.height, profile=profile)
            for name, x in (("1", -self.port_offset), ("2", self.port_offset))
        ]

    def simulation(self, structures=(), extra_monitors=()):
        """The :class:`mindelec.fdtd.Simulation` with these structures, the source and the port monitors."""
        from mindelec import fdtd

        source = fdtd.CurrentSource("Ez", self.waveform, center=(self.source_x, 0.0), size=(0.0, self.height))
        return fdtd.Simulation(
            size=self.size,
            cell_size=self.cell_size,
            boundary=(fdtd.PML(thickness=self.pml), fdtd.PEC()),
            sources=[source],
            structures=structures,
            monitors=[port.monitor(self.frequencies) for port in self.ports()] + list(extra_monitors),
            dtype=self.dtype,
        )

    def key(self) -> tuple:
        """Hashable description (caches the reference run)."""
        return (
            self.height,
            self.guide_length,
            self.cell_size,
            tuple(self.frequencies.tolist()),
            self.pml,
            self.port_offset,
            self.until,
            str(self.dtype),
        )


def _pulse(f_min, f_max):
    from mindelec import fdtd

    return fdtd.GaussianPulse(f0=0.5 * (f_min + f_max), fwidth=FWIDTH_FRACTION * (f_max - f_min))


@functools.lru_cache(maxsize=8)
def _reference_run(setup_key, setup: WaveguideSetup):
    return setup.simulation().run(until=setup.until, progress=False)


def _check_parameters(params, setup: WaveguideSetup) -> dict[str, float]:
    if not isinstance(params, dict):
        raise ArgumentTypeError(
            f"params must be a dict with keys {_PARAMETERS[:2]} (and optionally "
            f"'width'), got {type(params).__name__}"
        )
    unknown = sorted(set(params) - set(_PARAMETERS))
    missing = [name for name in _PARAMETERS[:2] if name not in params]
    if unknown or missing:
        raise UnknownNameError(
            f"params: unknown keys {unknown} / missing keys {missing}; expected 'length' (m), "
            "'permittivity' (relative) and optionally 'width' (m)"
        )
    values = {name: float(params[name]) for name in params}
    values.setdefault("width", setup.height)
    for name, value in values.items():
        if not (math.isfinite(value) and value > 0):
            raise ConfigurationError(f"params[{name!r}] must be a finite number > 0, got {params[name]!r}")
    if values["width"] > setup.height:
        raise ConfigurationError(
            f"params['width'] = {values['width']} m exceeds the guide height {setup.height} m")
    if values["length"] / 2 > setup.port_offset - 2 * setup.cell_size:
        raise ConfigurationError(
            f"params['length'] = {values['length']} m: the block must end at least two cells "
            f"before the ports at x = +-{setup.port_offset} m"
        )
    return values


def _device_structures(values, setup: WaveguideSetup):
    from mindelec import devices

    return devices.waveguide_obstacle(values["length"], values["width"], values["permittivity"], setup.height)


def sparameter_sample(params: dict, seed: int, **options) -> dict[str, np.ndarray]:
    """S11 and S21 over a fixed band of the waveguide with a dielectric block (one FDTD run).

    The dataset-generator contract: every call returns the same keys with the same shapes.

    Args:
        params: ``{"length": m, "permittivity": relative}`` and optionally ``"width"`` (m, default the
            guide height).
        seed: unused (the simulation is deterministic); accepted for the generator contract.
        **options: keyword arguments of :class:`WaveguideSetup` (``height``, ``cell_size``, ``f_min``,
            ``f_max``, ``n_frequencies``, ...); ``dtype`` may be given as ``"float32"``/``"float64"``.

    Returns:
        ``frequencies`` (F,) Hz; ``s11_real``, ``s11_imag``, ``s21_real``, ``s21_imag`` (F,) the complex
        S-parameters (reference planes at the ports, phasors ``exp(+j omega t)``); ``s11_db`` (F,)
        ``20 log10 |S11|``. All float64 numpy arrays.

    Raises:
        KeyError: for unknown or missing parameter names.
        ValueError: for non-positive values, a block wider than the guide or longer than the port spacing.
    """
    del seed  # deterministic
    from mindelec import ports

    setup = _setup_from_options(options)
    values = _check_parameters(params, setup)
    reference = _reference_run(setup.key(), setup)
    device = setup.simulation(_device_structures(values, setup)).run(until=setup.until, progress=False)
    column = ports.s_parameters(reference, device, setup.ports(), source_port=0).to(torch.complex128)
    s11, s21 = column[:, 0].numpy(), column[:, 1].numpy()
    return {
        "frequencies": setup.frequencies.numpy().copy(),
        "s11_real": s11.real.copy(),
        "s11_imag": s11.imag.copy(),
        "s21_real": s21.real.copy(),
        "s21_imag": s21.imag.copy(),
        "s11_db": 20 * np.log10(np.maximum(np.abs(s11), 1e-12)),
    }


def _setup_from_options(options) -> WaveguideSetup:
    options = dict(options)
    if isinstance(options.get("dtype"), str):
        name = options["dtype"]
        if name not in ("float32", "float64"):
            raise ConfigurationError(f"options['dtype'] must be 'float32' or 'float64', got {name!r}")
        options["dtype"] = getattr(torch, name)
    try:
        return WaveguideSetup(**options)
    except TypeError as error:
        raise ArgumentTypeError(f"sparameter options: {error}; see mindelec.sweeps.WaveguideSetup") from error


def field_sample(params: dict, seed: int, frequency: float = 11.5e9, **options) -> dict[str, np.ndarray]:
    """Permittivity map and frequency-domain Ez of the waveguide with a block, for field surrogates.

    Args:
        params, seed, options: as :func:`sparameter_sample`.
        frequency: the DFT frequency (Hz).

    Returns:
        ``permittivity`` (nx, ny): the relative permittivity on the Ez nodes (sub-cell averaged);
        ``field_real``, ``field_imag`` (nx, ny): the DFT of Ez on the same nodes divided by the peak
        ``|Ez|`` of the empty guide's DFT at that frequency (dimensionless); ``frequency`` (): Hz.
    """
    del seed
    from mindelec import fdtd, voxels

    setup = _setup_from_options(options)
    values = _check_parameters(params, setup)
    structures = _device_structures(values, setup)
    monitor = fdtd.DFTMonitor("field", [float(frequency)], ("Ez",))
    result = setup.simulation(structures, [monitor]).run(until=setup.until, progress=False)
    field = result["field"]["Ez"][0].to(torch.complex128) / _empty_guide_peak(
        setup.key(), float(frequency), setup
    )
    grid = fdtd.Grid(setup.size, setup.cell_size)
    permittivity = voxels.permittivity_grid(structures, grid, "Ez").to(torch.float64).numpy()
    field = field.numpy()
    return {
        "permittivity": permittivity,
        "field_real": field.real.copy(),
        "field_imag": field.imag.copy(),
        "frequency": np.float64(frequency),
    }


@functools.lru_cache(maxsize=8)
def _empty_guide_peak(setup_key, frequency, setup) -> float:
    """Peak |Ez| of the DFT at ``frequency`` in the empty guide: the normalisation of field maps."""
    from mindelec import fdtd

    monitor = fdtd.DFTMonitor("field", [frequency], ("Ez",))
    result = setup.simulation((), [monitor]).run(until=setup.until, progress=False)
    return float(result["field"]["Ez"][0].abs().max())


def s_matrix_from_sample(sample) -> np.ndarray:
    """The (F, 2, 2) complex S-matrix of a sample (``S22 = S11``, ``S12 = S21``: symmetric, reciprocal).

    Args:
        sample: a dict with ``s11_real``, ``s11_imag``, ``s21_real``, ``s21_imag`` arrays (F,).
    """
    s11 = np.asarray(sample["s11_real"]) + 1j * np.asarray(sample["s11_imag"])
    s21 = np.asarray(sample["s21_real"]) + 1j * np.asarray(sample["s21_imag"])
    return np.stack([np.stack([s11, s21], -1), np.stack([s21, s11], -1)], -2)


def block_s_parameters(
    frequencies,
    length: float,
    permittivity: float,
    setup: WaveguideSetup | None = None,
    discrete: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Analytic S11, S21 of a full-height block for the TM1 mode (the reference of the FDTD samples).

    Transverse impedances ``omega mu / k_x`` give the interface reflection ``(k0 - k1) / (k0 + k1)`` and the
    Fabry-Perot sum gives the slab's response; reference planes at the ports (phasors ``exp(+j omega t)``).
    With ``discrete=True`` the wavenumbers solve the 2D Yee dispersion relation of ``setup``'s grid (with
    ``k_y = pi / height``: the sine profile is an exact eigenvector of the discrete Laplacian), so what is
    left between this and the FDTD is the discretisation of the interfaces; otherwise the continuum
    ``k_x = sqrt(eps (2 pi f / c)^2 - (pi / height)^2)``.

    Args:
        frequencies: ``(F,)`` Hz (array).
        length: block length (m); permittivity: relative.
        setup: the guide (default :class:`WaveguideSetup()`).

    Returns:
        ``(s11, s21)``: two ``(F,)`` complex128 arrays.
    """
    setup = setup or WaveguideSetup()
    frequencies = np.asarray(frequencies, dtype=np.float64)
    if discrete:
        from mindelec import fdtd

        dx, dy = fdtd.Grid(setup.size, setup.cell_size).spacing[:2]
        dt = 0.99 / (SPEED_OF_LIGHT * math.sqrt(1 / dx**2 + 1 / dy**2))
        temporal = (np.sin(math.pi * frequencies * dt) / (SPEED_OF_LIGHT * dt)) ** 2
        transverse = (np.sin(math.pi * dy / (2 * setup.height)) / dy) ** 2

        def wavenumber(eps):
            return 2 / dx * np.arcsin(dx * np.sqrt(eps * temporal - transverse + 0j))
    else:

        def wavenumber(eps):
            return np.sqrt(
                eps * (2 * math.pi * frequencies / SPEED_OF_LIGHT) ** 2 - (math.pi / setup.height) ** 2 + 0j
            )

    k0, k1 = wavenumber(1.0), wavenumber(float(permittivity))
    interface = (k0 - k1) / (k0 + k1)
    round_trip = np.exp(-2j * k1 * length)
    denominator = 1 - interface**2 * round_trip
    gap = setup.port_offset - length / 2  # port to block face
    s11 = interface * (1 - round_trip) / denominator * np.exp(-2j * k0 * gap)
    s21 = (1 - interface**2) * np.exp(-1j * k1 * length) / denominator * np.exp(-2j * k0 * gap)
    return s11, s21
