"""Energy terms given by an OpenMM-style expression: the counterparts of OpenMM's Custom*Forces.

Each term evaluates an energy expression (:mod:`mindsponge.forcefield.expressions`: Lepton's
language, tabulated functions, ``;`` definitions) on all its interactions at once and sums the
results; forces come from autograd. The expression sees:

- :class:`CustomBond` (OpenMM ``CustomBondForce``): ``r`` (nm) between two atoms;
- :class:`CustomAngle` (``CustomAngleForce``): ``theta`` (rad) at the middle of three atoms;
- :class:`CustomTorsion` (``CustomTorsionForce``): the dihedral ``theta`` (rad, ``[-pi, pi]``);
- :class:`CustomExternal` (``CustomExternalForce``): ``x, y, z`` (nm) of one atom, and
  ``periodicdistance(x, y, z, x0, y0, z0)``;
- :class:`CustomCompoundBond` (``CustomCompoundBondForce``): ``x1, y1, z1, x2...`` of particles
  ``p1, p2...``, ``distance(p1, p2)``, ``angle(p1, p2, p3)``, ``dihedral(p1, p2, p3, p4)``;
- :class:`CustomCentroidBond` (``CustomCentroidBondForce``): the same on weighted centres of
  atom groups ``g1, g2...``;
- :class:`CustomNonbonded` (``CustomNonbondedForce``): ``r`` (nm) of a pair, per-particle
  parameters with suffixes ``1`` and ``2``;
- :class:`CustomGB` (``CustomGBForce``): per-particle computed values (of one particle, or summed
  over its pairs) and energy terms of one particle or of pairs;

plus per-interaction parameters, global parameters and tabulated functions. Global parameters
are a buffer (``term.expression.global_values``, names in ``global_names``) holding OpenMM's
default values; :meth:`ExpressionEnergy.set_global_parameter` changes one (as
``Context.setParameter`` does in OpenMM). With ``periodic=True`` differences between atoms
use the minimum image (OpenMM's ``setUsesPeriodicBoundaryConditions``); otherwise the box is
ignored, so molecules must be whole.

:class:`CustomNonbonded` follows OpenMM's ``CustomNonbondedForce``: all pairs not excluded (or
only those of its interaction groups, each pair once per group it belongs to), a cutoff with or
without periodic images, the same optional switching function as ``NonbondedForce``, and
OpenMM's long-range correction (the same numerical integral over particle classes, see
:meth:`CustomNonbonded.long_range_coefficient`).

Modules: :mod:`.energy` (:class:`ExpressionEnergy` and what the terms share), :mod:`.bonded`
(bond, angle, torsion, external, compound and centroid terms), :mod:`.nonbonded`
(:class:`CustomNonbonded`) with :mod:`.long_range` (its long-range correction), :mod:`.gb`
(:class:`CustomGB`).

Example::

    lj14 = CustomBond(pairs, "4*epsilon*((sigma/r)^12-(sigma/r)^6)", ["sigma", "epsilon"], table)
    restraint = CustomExternal(atoms, "k*periodicdistance(x, y, z, x0, y0, z0)^2",
                               ["x0", "y0", "z0"], reference, global_parameters={"k": 1000.0})
"""

from mindsponge.forcefield.custom.bonded import (
    CustomAngle,
    CustomBond,
    CustomCentroidBond,
    CustomCompoundBond,
    CustomExternal,
    CustomTorsion,
)
from mindsponge.forcefield.custom.energy import ExpressionEnergy
from mindsponge.forcefield.custom.gb import CustomGB
from mindsponge.forcefield.custom.nonbonded import CustomNonbonded

__all__ = [
    "ExpressionEnergy",
    "CustomBond",
    "CustomAngle",
    "CustomTorsion",
    "CustomExternal",
    "CustomCompoundBond",
    "CustomCentroidBond",
    "CustomNonbonded",
    "CustomGB",
]
