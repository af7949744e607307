"""Derivatives of any order of tensor fields on batches of points (PINN residuals, force matching).

Two ways, one vocabulary (points ``x`` of shape ``(B, d)``, fields ``(B,)`` or ``(B, k)``):

- :mod:`common.autodiff.graph`: on an existing graph ``u = model(x)`` of any pointwise model, by
  reverse passes (``grad``, ``jacobian``, ``hessian``, ``laplacian``, ``divergence``, ``curl``,
  ``derivative``, ``hvp``, :class:`Derivatives`);
- :mod:`common.autodiff.forward`: on the model itself, for networks built from :mod:`common.nn`, by
  pushing jets forward through the layers (``forward_laplacian``, ``forward_derivative``,
  ``forward_hessian``, :class:`HessianJet` and :func:`propagate`), faster and with no nested graph.

Example:
    >>> from common import autodiff as ad
    >>> x = points.requires_grad_()                 # (B, 3): x, y, t
    >>> u = model(x)                                # (B, 1)
    >>> residual = ad.derivative(u, x, (2,)) - ad.laplacian(u, x, dims=(0, 1))   # heat equation
    >>> jet = ad.forward_laplacian(model, points, dims=(0, 1))                     # the same, forward
"""

from common.autodiff.forward import (
    HessianJet,
    Jet,
    forward_derivative,
    forward_hessian,
    forward_laplacian,
    propagate,
)
from common.autodiff.graph import (
    Derivatives,
    curl,
    derivative,
    divergence,
    grad,
    hessian,
    hvp,
    jacobian,
    laplacian,
)

__all__ = [
    "Derivatives",
    "HessianJet",
    "Jet",
    "curl",
    "derivative",
    "divergence",
    "forward_derivative",
    "forward_hessian",
    "forward_laplacian",
    "grad",
    "hessian",
    "hvp",
    "jacobian",
    "laplacian",
    "propagate",
]
