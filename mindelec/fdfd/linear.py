"""The differentiable sparse solve of the FDFD system, with adjoint gradients.

The system matrix is ``A = Dxb W_x Dxf + Dyb W_y Dyf + diag(c)`` (``Dxf``/``Dxb`` the
PML-stretched forward/backward differences; TM: ``W = 1``, ``c = k0^2 eps_r``; TE:
``W = diag(1/eps_r)`` at the half-cell points, ``c = k0^2``). :func:`solve_linear_system`
solves ``A x = b`` with one sparse LU factorisation (``scipy.sparse.linalg.splu``) and
keeps it for the backward pass. Derivation of the backward pass, for a real loss ``L``:

* PyTorch's gradient of a real ``L`` with respect to a complex ``z = u + j v`` is
  ``g_z = dL/du + j dL/dv = 2 dL/dz*`` (conjugate Wirtinger), so that to first order
  ``dL = Re(sum conj(g_z) dz)``. It is what arrives as ``grad_output`` for ``x``.
* From ``A x = b``: ``dx = A^-1 (db - dA x)``, hence
  ``dL = Re(g_x^H A^-1 (db - dA x)) = Re(lambda^H (db - dA x))`` with the adjoint field
  ``lambda`` solving ``A^H lambda = g_x`` (one solve with the cached factors, ``trans='H'``).
* Source: ``dL = Re(lambda^H db)``, so ``g_b = lambda``.
* Diagonal ``c`` (entry n enters as ``dA = e_n e_n^T dc_n``): ``dL = Re(-conj(lambda_n) x_n dc_n)``,
  so ``g_c = -lambda * conj(x)``; for a real parameter the gradient is the real part,
  ``dL/dc_n = -Re(conj(lambda_n) x_n)``. With ``c = k0^2 eps_r`` the chain rule gives
  ``dL/deps_r = -k0^2 Re(conj(lambda) x)``.
* Weights ``W_x`` (``dA = Dxb e_n e_n^T Dxf dw_n``): ``g_w = -(Dxb^H lambda) * conj(Dxf x)``.

Batches of sources (several right-hand sides) reuse the same factorisation; their
gradients are summed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sparse
import scipy.sparse.linalg as sparse_linalg
import torch

__all__ = ["DifferenceOperators", "solve_linear_system", "difference_matrices", "complex_dtype", "to_numpy"]


def complex_dtype(dtype: torch.dtype) -> torch.dtype:
    """The complex dtype with the precision of a real (or complex) dtype."""
    if dtype.is_complex:
        return dtype
    return torch.complex128 if dtype == torch.float64 else torch.complex64


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A complex128 NumPy copy of ``tensor`` on the host, for scipy's sparse solvers."""
    # scipy's sparse LU runs on the host; this is the one place fields leave the device.
    return tensor.detach().to("cpu").numpy().astype(np.complex128)


@dataclass
class DifferenceOperators:
    """PML-stretched differences (scipy sparse) on the flattened (Nx * Ny) main-field nodes.

    ``forward_x``: ((Nx + 1) Ny) x (Nx Ny), to the half nodes along x (see
    :func:`difference_matrices`); ``backward_x`` its negative transpose, stretched at the main
    nodes; likewise along y with (Nx (Ny + 1)) half nodes.
    """

    forward_x: sparse.csr_matrix
    backward_x: sparse.csr_matrix
    forward_y: sparse.csr_matrix
    backward_y: sparse.csr_matrix


class _SparseSolve(torch.autograd.Function):
    """``x = A(c, w_x, w_y)^-1 b`` with adjoint gradients; see the module docstring."""

    @staticmethod
    def forward(ctx, rhs, diagonal, weight_x, weight_y, operators):
        matrix = (
            operators.backward_x @ sparse.diags(to_numpy(weight_x)) @ operators.forward_x
            + operators.backward_y @ sparse.diags(to_numpy(weight_y)) @ operators.forward_y
            + sparse.diags(to_numpy(diagonal))
        )
        factors = sparse_linalg.splu(matrix.tocsc())
        solution = factors.solve(to_numpy(rhs))
        ctx.factors = factors
        ctx.operators = operators
        ctx.solution = solution
        ctx.input_dtypes = (diagonal.dtype, weight_x.dtype, weight_y.dtype)
        return torch.from_numpy(solution).to(device=rhs.device, dtype=rhs.dtype)

    @staticmethod
    def backward(ctx, grad_solution):
        adjoint = ctx.factors.solve(to_numpy(grad_solution), trans="H")
        solution, operators = ctx.solution, ctx.operators
        device, complex_dtype = grad_solution.device, grad_solution.dtype

        def parameter_gradient(values, dtype):
            gradient = torch.from_numpy(values.sum(axis=1)).to(device=device, dtype=complex_dtype)
            return gradient if dtype.is_complex else gradient.real.to(dtype)

        grad_rhs = torch.from_numpy(adjoint).to(device=device, dtype=complex_dtype)
        grad_diagonal = grad_weight_x = grad_weight_y = None
        if ctx.needs_input_grad[1]:
            grad_diagonal = parameter_gradient(-adjoint * solution.conj(), ctx.input_dtypes[0])
        if ctx.needs_input_grad[2]:
            values = -(operators.backward_x.conj().T @ adjoint) * (operators.forward_x @ solution).conj()
            grad_weight_x = parameter_gradient(values, ctx.input_dtypes[1])
        if ctx.needs_input_grad[3]:
            values = -(operators.backward_y.conj().T @ adjoint) * (operators.forward_y @ solution).conj()
            grad_weight_y = parameter_gradient(values, ctx.input_dtypes[2])
        return grad_rhs, grad_diagonal, grad_weight_x, grad_weight_y, None


def solve_linear_system(rhs, diagonal, weight_x, weight_y, operators):
    """Solve ``(Dxb W_x Dxf + Dyb W_y Dyf + diag(c)) x = b`` differentiably.

    Args:
        rhs: (N, B) complex tensor, the right-hand sides ``b`` (B sources; N = Nx Ny).
        diagonal: (N,) real or complex tensor ``c``.
        weight_x, weight_y: real or complex tensors, the diagonals of ``W_x`` ((Nx + 1) Ny) and
            ``W_y`` (Nx (Ny + 1)), on the half nodes (flattened, x first).
        operators: the PML-stretched :class:`DifferenceOperators` (built by
            :class:`~mindelec.fdfd.Simulation`).

    Returns:
        (N, B) complex tensor ``x``, same dtype and device as ``rhs``. Gradients flow to
        ``rhs``, ``diagonal`` and the weights by one adjoint solve (module docstring).
    """
    return _SparseSolve.apply(rhs, diagonal, weight_x, weight_y, operators)


def difference_matrices(count: int, step: float):
    """1D differences with zero field one node beyond each end.

    ``forward`` ((count + 1) x count) maps the nodes to the count + 1 half nodes between and
    around them (row ``r`` is the half node between nodes ``r - 1`` and ``r``); ``backward``
    (count x (count + 1)) is ``-forward^T`` and maps back.
    """
    forward = sparse.diags([np.ones(count), -np.ones(count)], [0, -1], shape=(count + 1, count)) / step
    return forward.tocsr(), (-forward.T).tocsr()
