"""Physics-informed networks for Maxwell's equations, built on :mod:`common.pde` (the package's entry).

Equations (SI, linear isotropic medium with relative permittivity ``eps_r`` and permeability ``mu_r``,
electric current density ``J`` and magnetic current density ``M``, as :mod:`mindelec.fdtd`)::

    eps_r eps_0 dE/dt =  curl H - J
    mu_r  mu_0  dH/dt = -curl E - M

Non-dimensionalisation (:class:`Scales`): lengths in units of ``L``, times in ``T = L / c``, electric
fields in ``E0``, magnetic fields in ``H0 = E0 / eta_0``. In these units ``eps_0 = mu_0 = c = 1``::

    eps_r dE'/dt' =  curl' H' - J'       J' = J L eta_0 / E0
    mu_r  dH'/dt' = -curl' E' - M'       M' = M L / E0

so a network sees coordinates and fields of order one whatever the SI magnitudes (metres and
nanoseconds, 1e-9 s against 1 m). All residual functions here work in these dimensionless units on
points ``(B, d)`` (space columns, then time) and fields ``(B, k)`` from a network, through
:mod:`common.autodiff`.

Modules (every public name is re-exported here: ``from mindelec import pinn; pinn.X``):

- :mod:`~mindelec.pinn.sources`: :class:`Scales`, :class:`PointSource`, :class:`PointSourceSetup`;
- :mod:`~mindelec.pinn.residuals`, :mod:`~mindelec.pinn.problems`, :mod:`~mindelec.pinn.models`,
  :mod:`~mindelec.pinn.potential`, :mod:`~mindelec.pinn.reference` (FDTD reference solutions,
  :func:`fdtd_reference`; :func:`fdfd_reference` for the Helmholtz problem),
  :mod:`~mindelec.pinn.schedule`, as follows.

Contents:

- residuals: :func:`maxwell_te_residual` (Ex, Ey, Hz), :func:`maxwell_tm_residual` (Ez, Hx, Hy),
  :func:`maxwell_3d_residual` (Ex, Ey, Ez, Hx, Hy, Hz), :func:`helmholtz_residual` (frequency
  domain, real and imaginary parts);
- boundaries: :func:`mur_residual` (first-order Mur / Engquist-Majda absorbing condition
  ``du/dt + v du/dn = 0``), :func:`sommerfeld_residual` (its frequency-domain form
  ``du/dn - i k u = 0``);
- sources: :class:`PointSource` (a Gaussian-smoothed delta in space times a waveform such as
  :class:`mindelec.fdtd.GaussianPulse` or :class:`~mindelec.fdtd.Ricker`);
- problems: :func:`point_source_problem` (2D TE/TM time domain, parametric in ``eps_r``/``mu_r`` if
  ranges are given, for pre-training and incremental fine-tuning), :func:`helmholtz_problem`;
- models: :func:`default_model` (multi-scale sine network, :class:`common.nn.MultiScaleMLP`, on
  optional Fourier features), :class:`ZeroInitialFields` (zero fields at ``t = 0`` by construction);
- schedule: :class:`Schedule` (time windows then the whole interval, warm-up and cosine decay over the
  run), :func:`train_schedule` (the whole schedule in one call, one Adam carried over the phases),
  :func:`fine_tune` (incremental training, :func:`freeze_early_layers`), :func:`reference_monitor`;
- 2D TE potential formulation (``formulation="potential"``): :class:`PotentialTE` (``Ex = psi_y``,
  ``Ey = -psi_x``, ``Hz = eps_r psi_t``: two of the three equations hold exactly, derivatives in one
  forward-mode pass), :class:`PointSourcePotential` (the source's quasi-static near field, added to the
  network's potential), :func:`wave_potential_residual`, :func:`mur_potential_residual`.

Example::

    import mindelec as me
    from common import pde
    setup = me.pinn.PointSourceSetup()            # MindElec's 2D TE benchmark: [0, 1]^2 m, 1 GHz, 4 ns
    problem, scales = me.pinn.point_source_problem(setup)
    model = me.pinn.default_model(problem, scales)
    pde.Trainer(problem, model, steps=20000, resample_every=10).fit()
    fields = scales.fields_si(model, points_si)   # (B, 3) Ex, Ey (V/m), Hz (A/m)
"""

from mindelec.pinn.models import ZeroInitialFields, default_model
from mindelec.pinn.potential import (
    POTENTIAL_JET,
    PointSourcePotential,
    PotentialTE,
    engquist_majda_potential_residual,
    mur_potential_residual,
    potential_fields,
    wave_potential_residual,
)
from mindelec.pinn.problems import helmholtz_problem, point_source_problem
from mindelec.pinn.reference import FDFDReference, FDTDReference, fdfd_reference, fdtd_reference
from mindelec.pinn.residuals import (
    helmholtz_residual,
    maxwell_3d_residual,
    maxwell_te_residual,
    maxwell_tm_residual,
    mur_residual,
    sommerfeld_residual,
)
from mindelec.pinn.schedule import Schedule, fine_tune, freeze_early_layers, reference_monitor, train_schedule
from mindelec.pinn.sources import FIELDS, PointSource, PointSourceSetup, Scales

__all__ = [
    "FIELDS",
    "POTENTIAL_JET",
    "PointSource",
    "PointSourcePotential",
    "PointSourceSetup",
    "PotentialTE",
    "Scales",
    "Schedule",
    "ZeroInitialFields",
    "FDFDReference",
    "FDTDReference",
    "default_model",
    "fdfd_reference",
    "fdtd_reference",
    "fine_tune",
    "freeze_early_layers",
    "helmholtz_problem",
    "helmholtz_residual",
    "maxwell_3d_residual",
    "maxwell_te_residual",
    "maxwell_tm_residual",
    "engquist_majda_potential_residual",
    "mur_potential_residual",
    "mur_residual",
    "point_source_problem",
    "potential_fields",
    "reference_monitor",
    "sommerfeld_residual",
    "train_schedule",
    "wave_potential_residual",
]
