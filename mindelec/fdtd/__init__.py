"""Differentiable Yee-grid FDTD in 1D, 2D (TM/TE) and 3D on torch tensors.

The entry point is :class:`Simulation`::

    import mindelec as me
    sim = me.fdtd.Simulation(size=(2e-3, 2e-3), cell_size=10e-6, boundary=me.fdtd.PML(thickness=20),
                             sources=[me.fdtd.PointDipole(
                                 position=(0, 0), component="Ez",
                                 waveform=me.fdtd.GaussianPulse(f0=150e9, fwidth=100e9))],
                             monitors=[me.fdtd.FieldProbe("p", position=(2e-4, 0), components=("Ez",))])
    result = sim.run(until=50e-12)
    result["p"]["Ez"]     # (steps,) time series; result.times the matching times (s); sim.dt the step (s)

Modules: :mod:`~mindelec.fdtd.grid` (Yee staggering), :mod:`~mindelec.fdtd.materials` (media, structures,
design regions), :mod:`~mindelec.fdtd.thin_wire` (sub-cell wires), :mod:`~mindelec.fdtd.boundaries`
(CPML, periodic, PEC), :mod:`~mindelec.fdtd.sources`,
:mod:`~mindelec.fdtd.waveforms`, :mod:`~mindelec.fdtd.tfsf` (a plane wave through the faces of a
total-field/scattered-field box), :mod:`~mindelec.fdtd.monitors` (specifications and their per-run
recorders), :mod:`~mindelec.fdtd.flux_box` (closed-box flux), :mod:`~mindelec.fdtd.cross_sections`
(scattering and absorption cross-sections), :mod:`~mindelec.fdtd.near_to_far` (far fields),
:mod:`~mindelec.fdtd.coefficients` (materials on the grid), :mod:`~mindelec.fdtd.state` and
:mod:`~mindelec.fdtd.updates` (the step), :mod:`~mindelec.fdtd.checkpointing` (differentiable runs),
:mod:`~mindelec.fdtd.restart` (restart files: a run that dies resumes), :mod:`~mindelec.fdtd.simulation`
(the driver), :mod:`~mindelec.fdtd.limits` (what a set-up can carry:
frequencies, time step, memory), :mod:`~mindelec.fdtd.placement` (refusals and warnings about where things
sit), :mod:`~mindelec.fdtd.result`.
Set-up pictures: :mod:`~mindelec.fdtd.plotting`; subpixel smoothing: :mod:`~mindelec.fdtd.smoothing` and
:mod:`~mindelec.fdtd.offdiagonal` (its off-diagonal terms); conformal PEC:
:mod:`~mindelec.fdtd.conformal` and, for zero-thickness sheets, :mod:`~mindelec.fdtd.sheet_rims`.

An FDTD run flows one way: ``Simulation`` turns its set-up into update coefficients and a
``YeeStepper``, asks each monitor for a fresh ``Recorder``, steps a ``YeeState`` from zero fields,
hands the fields to the recorders after every step, and collects their outputs into a ``Result``.
"""

from .boundaries import PML, Periodic
from .cross_sections import CrossSectionMonitor
from .flux_box import FluxBox
from .grid import Grid, GridWarning
from .lumped import LumpedPort, lumped_resistor
from .materials import PEC, AxialConductivity, DesignRegion, Drude, Lorentz, Medium, Structure, pec_sheet
from .mode_monitors import ModeMonitor
from .mode_sources import CrossSection, ModeSource
from .monitors import DFTMonitor, FieldProbe, FluxMonitor, Monitor, Recorder, Snapshots
from .near_to_far import NearToFarMonitor, NearToFarResult, radiation_overlaps
from .placement import PlacementWarning
from .plotting import outline_structures, plot_simulation
from .result import Result
from .run_control import Decay
from .simulation import FieldBlowUpError, Simulation
from .sources import CurrentSource, PlaneWave, PointDipole
from .tfsf import TFSFBox, direction_from_angles
from .thin_wire import ThinWire
from .waveforms import ContinuousWave, GaussianPulse, Ricker

__all__ = [
    "Simulation",
    "Result",
    "Grid",
    "GridWarning",
    "PlacementWarning",
    "PML",
    "Periodic",
    "PEC",
    "Medium",
    "Drude",
    "Lorentz",
    "Structure",
    "DesignRegion",
    "PointDipole",
    "PlaneWave",
    "TFSFBox",
    "direction_from_angles",
    "CurrentSource",
    "GaussianPulse",
    "Ricker",
    "ContinuousWave",
    "FieldProbe",
    "DFTMonitor",
    "FluxMonitor",
    "FluxBox",
    "CrossSectionMonitor",
    "Decay",
    "NearToFarMonitor",
    "NearToFarResult",
    "radiation_overlaps",
    "Snapshots",
    "Monitor",
    "Recorder",
    "FieldBlowUpError",
    "AxialConductivity",
    "pec_sheet",
    "ThinWire",
    "LumpedPort",
    "lumped_resistor",
    "CrossSection",
    "ModeSource",
    "ModeMonitor",
    "plot_simulation",
    "outline_structures",
]
