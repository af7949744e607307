"""Soft current sources.

A source adds a current density ``J`` (for an E component) or a magnetic current density
``M`` (for an H component) to the update of one field component on a set of Yee nodes:
``eps dE/dt = curl H - J``, ``mu dH/dt = -curl E - M``. The current waveform is evaluated at the
midpoint of each update (``(n + 1/2) dt`` for E, ``n dt`` for H).
"""

import math

from .grid import ACTIVE_COMPONENTS


class CurrentSource:
    """A uniform current on a point, line, area or volume.

    The current density on the covered nodes is ``amplitude * waveform(t) / prod(dx)`` where the
    product runs over the axes along which the source has zero size, so ``amplitude`` is a current
    moment: A m in 3D for a point (a dipole ``I l``), A for a point in 2D (a line current along z),
    A/m for a point in 1D (a current sheet), and per unit length/area accordingly for extended sources.

    Args:
        component: ``"Ex"`` .. ``"Hz"``, one the simulation carries.
        waveform: a callable of a tensor of times (s), e.g. :class:`GaussianPulse`.
        center: centre (m), one coordinate per dimension.
        size: extent (m) per dimension; zeros make a point source.
        amplitude: current moment (see above); magnetic sources in V m^(d-2).
    """

    def __init__(self, component, waveform, center, size=None, amplitude=1.0):
        if not callable(waveform):
            raise TypeError(
                f"{type(self).__name__}: waveform must be callable on a tensor of times, got {waveform!r}"
            )
        self.component = component
        self.waveform = waveform
        self.center = tuple(float(value) for value in center)
        self.size = tuple(0.0 for _ in self.center) if size is None else tuple(float(value) for value in size)
        self.amplitude = float(amplitude)

    def bind(self, grid, polarization):
        """Grid index slices and current-density scale ``(slices, scale)`` for this source.

        Raises:
            ValueError: naming the source if its component is not simulated or it lies outside the domain.
        """
        active = ACTIVE_COMPONENTS[(grid.ndim, polarization)]
        if self.component not in active:
            raise ValueError(
                f"{self!r}: component {self.component!r} is not simulated; "
                f"this {grid.ndim}D simulation has {', '.join(active)}"
            )
        slices = grid.index_range(self.center, self.size, self.component, repr(self))
        zero_axes = [a for a in range(grid.ndim) if self.size[a] == 0]
        scale = self.amplitude / math.prod(grid.spacing[a] for a in zero_axes)
        return slices, scale

    def __repr__(self):
        return (
            f"{type(self).__name__}(component={self.component!r}, center={self.center}, size={self.size}, "
            f"waveform={self.waveform!r})"
        )


class PointDipole(CurrentSource):
    """A point current source (a dipole in 3D, a line current in 2D, a current sheet in 1D).

    Args:
        position: (m), one coordinate per dimension.
        component: the field component driven, e.g. ``"Ez"``.
        waveform: e.g. ``GaussianPulse(f0, fwidth)``.
        amplitude: current moment (A m^(d-2)), see :class:`CurrentSource`.
    """

    def __init__(self, position, component, waveform, amplitude=1.0):
        super().__init__(component, waveform, center=position, size=None, amplitude=amplitude)

    def __repr__(self):
        return (
            f"PointDipole(position={self.center}, component={self.component!r}, waveform={self.waveform!r})"
        )
