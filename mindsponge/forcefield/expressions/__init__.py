"""OpenMM's energy-expression language compiled to torch, and OpenMM's tabulated functions.

OpenMM's custom forces (``CustomBondForce``, ``CustomNonbondedForce``...) give their energy as a
string in the expression language of its Lepton library, for example::

    4*eps*((sigma/r)^12-(sigma/r)^6); sigma=0.5*(sigma1+sigma2); eps=sqrt(eps1*eps2)

The first part is the energy; the parts after ``;`` define intermediate values, each usable in
the parts before it. :func:`compile_expression` parses every part with sympy (``^`` is the
power, as in Lepton; Lepton's precedence and associativity are Python's) and turns the result
into a :class:`CompiledExpression`: a callable that maps named tensors to a tensor, built from
torch operations, so that forces come from autograd. Each intermediate value is computed once
per call.

Supported functions, with Lepton's definitions:

=================================================  ================================================
``sqrt exp log sin cos tan asin acos atan``        as in C (radians, natural logarithm)
``sec csc cot sinh cosh tanh erf erfc``
``atan2(y, x)``, ``min(a, b)``, ``max(a, b)``      as in C
``abs floor ceil``                                 as in C (zero derivative for ``floor``, ``ceil``)
``square(x)``, ``cube(x)``, ``recip(x)``           ``x^2``, ``x^3``, ``1/x``
``step(x)``                                        1 if ``x >= 0`` else 0
``delta(x)``                                       1 if ``x == 0`` else 0
``select(x, y, z)``                                ``y`` if ``x != 0`` else ``z``
tabulated functions, by name                       :class:`Continuous1DFunction` ... (below)
``pointdistance``, ``pointangle``,                 geometry of points given by coordinates
``pointdihedral``, ``periodicdistance``            (``pointdistance(x1,y1,z1,x2,y2,z2)``...), with
                                                   the minimum image when a box is given
``distance(p1,p2)``, ``angle(p1,p2,p3)``,          the same on named particles ``p1``... whose
``dihedral(p1,p2,p3,p4)``                          coordinates are ``x1, y1, z1``... (compound and
                                                   centroid bonds)
=================================================  ================================================

Anything else (an unknown function, a wrong number of arguments, an unknown variable) raises
:class:`ExpressionError` naming the expression, the function or variable, and the force it
belongs to.

Tabulated functions follow OpenMM's Reference platform: ``Continuous1DFunction`` is a natural
(or periodic) cubic spline, ``Continuous2DFunction``/``Continuous3DFunction`` are bicubic and
tricubic patches whose knot derivatives come from such splines, all zero outside their range
unless periodic; ``Discrete1D/2D/3DFunction`` round their arguments to the nearest integer
(halves away from zero) and clamp them to the table. Their tables are float64 buffers.

Modules: :mod:`.language` (the functions, in torch), :mod:`.parsing` (text to sympy trees),
:mod:`.compiler` (trees to torch closures), :mod:`.evaluation` (:class:`CompiledExpression`
and what one call sees), :mod:`.tabulated` (the tabulated functions).

Example::

    energy = compile_expression("k*(r-r0)^2", context="my bond")
    energy({"k": torch.tensor([100.0]), "r": r, "r0": torch.tensor([0.1])})
"""

from mindsponge.forcefield.expressions.compiler import compile_expression
from mindsponge.forcefield.expressions.evaluation import CompiledExpression
from mindsponge.forcefield.expressions.language import LEPTON_FUNCTIONS, ExpressionError
from mindsponge.forcefield.expressions.tabulated import (
    Continuous1DFunction,
    Continuous2DFunction,
    Continuous3DFunction,
    Discrete1DFunction,
    Discrete2DFunction,
    Discrete3DFunction,
    TabulatedFunction,
)

__all__ = [
    "ExpressionError",
    "CompiledExpression",
    "compile_expression",
    "LEPTON_FUNCTIONS",
    "TabulatedFunction",
    "Continuous1DFunction",
    "Continuous2DFunction",
    "Continuous3DFunction",
    "Discrete1DFunction",
    "Discrete2DFunction",
    "Discrete3DFunction",
]
