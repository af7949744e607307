"""Physics-informed training: a :class:`Problem` of named constraints, a :class:`Trainer` to fit a model.

A problem is a set of named constraints, each a residual that should vanish on its own set of
points, drawn by its own sampler with its own point count and weight:

- :class:`Residual`: a PDE residual ``fn(points, outputs)`` in the interior of a domain;
- :class:`Boundary`: ``fn(points, outputs, normals)`` on the boundary of a domain (for a
  space x time domain, the lateral boundary ``boundary(space) x [t0, t1]``);
- :class:`Initial`: ``fn(points, outputs)`` on the initial slice ``space x {t0}`` of a space x time domain;
- :class:`Data`: supervised values at given points (``outputs - values``).

Residual functions are plain functions of tensors: ``points`` is ``(B, d)`` with
``requires_grad=True`` (the problem's variables in order, parameters last), ``outputs`` is the
model's ``(B, k)`` output, and derivatives come from :mod:`common.autodiff`. A function returns a
tensor ``(B,)`` or ``(B, m)`` or a tuple of such tensors (one per equation); the constraint's loss
is the mean square of all of them. Nothing here knows any physics: a Poisson, Burgers or Maxwell
problem is a choice of residual functions.

Parametric problems: ``Problem(..., parameters={"permittivity": (1.0, 4.0)})`` appends one input
column per parameter, sampled over its range for every constraint point, so one network learns the
whole family; a range ``(value, value)`` fixes the parameter (fine-tuning for one value).

Example (1D Poisson, ``-u'' = pi^2 sin(pi x)`` on ``[0, 1]``, ``u(0) = u(1) = 0``)::

    from common import autodiff as ad, geometry as geo, nn as cnn, pde
    line = geo.Interval(0.0, 1.0)
    problem = pde.Problem(("x",), ("u",), [
        pde.Residual("pde", line, lambda x, u: ad.laplacian(u, x) + math.pi**2 * torch.sin(math.pi * x[:, 0]),
                     n_points=128),
        pde.Boundary("walls", line, lambda x, u, normals: u, n_points=2, weight=10.0),
    ])
    trainer = pde.Trainer(problem, cnn.MLP(1, 1, 32, 3), learning_rate=1e-2, steps=2000, lbfgs_steps=200)
    trainer.fit()
    trainer.history["loss"][-1]

The package: :mod:`~common.pde.constraints`, :mod:`~common.pde.problem` and
:mod:`~common.pde.trainer` (on the shared :mod:`common.training` loop).
"""

from common.pde.constraints import Boundary, Constraint, Data, Initial, Residual
from common.pde.problem import Problem, relative_l2
from common.pde.trainer import Trainer

__all__ = ["Boundary", "Constraint", "Data", "Initial", "Problem", "Residual", "Trainer", "relative_l2"]
