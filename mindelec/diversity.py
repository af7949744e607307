"""Figures of merit of several antennas together: envelope correlation, embedded efficiency, diversity gain.

Everything here derives from one ``(N, N)`` matrix per frequency, the *radiation matrix* of ``N`` ports:
``R_ij = oint E_i . conj(E_j) dOmega / eta0`` with ``E_j`` the far field (``r E``) radiated when a unit
incident power wave drives port ``j`` and the other ports are terminated in their reference impedances
(the embedded pattern). Its diagonal is each port's total embedded efficiency (radiated power over incident
power: mismatch, coupling into the other ports and losses included), and the envelope correlation
coefficient of ports ``i`` and ``j`` in a uniform isotropic environment (Vaughan & Andersen 1987) is::

    rho_e,ij = |R_ij|^2 / (R_ii R_jj).

Two routes give ``R``:

* from the far fields (:func:`radiation_matrix`): the near-to-far transform of each port's run, combined so
  that each column has a unit incident wave at its port and none at the others (the terminated ports'
  measured incident waves are taken out, see :mod:`mindelec.multiport`);
* from the S matrix alone, for lossless antennas (:func:`lossless_radiation_matrix`): power conservation
  ``P_rad = a^H (1 - S^H S) a`` gives ``R = (1 - S^H S)^T``; for two ports its envelope correlation is the
  formula of Blanch, Romeu & Corbella (Electronics Letters 39 (9), 2003)::

      rho_e = |S11* S12 + S21* S22|^2 / ((1 - |S11|^2 - |S21|^2) (1 - |S22|^2 - |S12|^2)).

  With losses in the antennas the S matrix overstates the radiated power ``R_ii`` and this route
  misjudges the correlation: use the far fields.

Conventions: tensors ``(F, N, N)`` with ``[f, i, j]``; powers in W per unit incident power (dimensionless
efficiencies) when the far fields are normalised by the incident waves of the FDTD ports (the spectral
densities of :mod:`mindelec.fdtd.near_to_far` and :mod:`mindelec.fdtd.lumped` share one convention).
"""

import torch

from common.errors import ConfigurationError

from .fdtd import radiation_overlaps


def _square(matrix, owner):
    """``matrix`` as a (F, N, N) tensor, a single (N, N) one given one frequency."""
    matrix = torch.as_tensor(matrix)
    matrix = matrix[None] if matrix.dim() == 2 else matrix
    if matrix.dim() != 3 or matrix.shape[1] != matrix.shape[2]:
        raise ConfigurationError(
            f"{owner}: expected a (F, N, N) or (N, N) matrix, got shape {tuple(matrix.shape)}"
        )
    return matrix


def lossless_radiation_matrix(s_matrix):
    """The radiation matrix of lossless antennas from their S matrix: ``R = (1 - S^H S)^T``.

    Args:
        s_matrix: (F, N, N) or (N, N) complex S-parameters, ``[f, i, j] = S_ij``.

    Returns:
        (F, N, N) complex Hermitian: the radiated power (per unit incident power) and the pattern overlaps the
        S matrix implies when no power is lost in the antennas (module docstring).
    """
    s_matrix = _square(s_matrix, "lossless_radiation_matrix")
    identity = torch.eye(s_matrix.shape[-1], dtype=s_matrix.dtype, device=s_matrix.device)
    return (identity - s_matrix.mH @ s_matrix).transpose(-2, -1)


def radiation_matrix(far_fields, incident):
    """The radiation matrix of ``N`` ports from the far field of each port's run (module docstring).

    Args:
        far_fields: ``N`` :class:`~mindelec.fdtd.NearToFarResult`, the far field of the run driving port
            ``j`` (e.g. :meth:`mindelec.multiport.MultiportResult.far_fields`), each of the same ``F``
            frequencies and ground.
        incident: (F, N, N) complex, the incident power waves ``a_ij`` at port ``i`` in run ``j``
            (:attr:`mindelec.multiport.MultiportResult.incident`), in the convention of the far fields (the
            FDTD's spectral densities).

    Returns:
        (F, N, N) complex Hermitian: ``R_ij`` for unit incident waves; its diagonal the total embedded
        efficiencies.

    Raises:
        ConfigurationError: when ``incident`` is not (F, N, N) for the ``N`` far fields of ``F`` frequencies.
    """
    overlaps = radiation_overlaps(far_fields)  # the runs' fields: E_run = E_unit A
    incident = _square(incident, "radiation_matrix").to(overlaps.device, overlaps.dtype)
    if incident.shape != overlaps.shape:
        raise ConfigurationError(
            f"radiation_matrix: incident has shape {tuple(incident.shape)}, expected "
            f"{tuple(overlaps.shape)} for {overlaps.shape[1]} far fields of {overlaps.shape[0]} frequencies"
        )
    inverse = torch.linalg.inv(incident)  # E_unit = E_run A^-1
    return inverse.transpose(-2, -1) @ overlaps @ inverse.conj()


def envelope_correlation(radiation):
    """Envelope correlation coefficients ``rho_e,ij = |R_ij|^2 / (R_ii R_jj)`` (module docstring).

    Args:
        radiation: (F, N, N) or (N, N) complex radiation matrix (:func:`radiation_matrix` or
            :func:`lossless_radiation_matrix`).

    Returns:
        (F, N, N) real in ``[0, 1]`` for a positive semi-definite ``R``; ones on the diagonal.

    Raises:
        ConfigurationError: when a port radiates nothing (``R_ii <= 0``), naming the port and frequency.
    """
    radiation = _square(radiation, "envelope_correlation")
    power = torch.diagonal(radiation, dim1=-2, dim2=-1).real
    if not bool((power > 0).all()):
        f, port = (int(value) for value in torch.nonzero(power <= 0)[0])
        raise ConfigurationError(
            f"envelope_correlation: port {port} radiates no power at frequency index {f} (R_ii = "
            f"{float(power[f, port]):.3g}); its correlation is undefined (a lossless-antenna formula on a "
            "lossy or mismatched S matrix can give this)"
        )
    return radiation.abs() ** 2 / (power[..., :, None] * power[..., None, :])


def total_efficiency(radiation):
    """(F, N) real: each port's total embedded efficiency ``R_jj`` (radiated over incident power, with the
    other ports terminated), the diagonal of a radiation matrix (:func:`radiation_matrix`)."""
    return torch.diagonal(_square(radiation, "total_efficiency"), dim1=-2, dim2=-1).real


def diversity_gain(correlation):
    """The apparent diversity gain ``10 sqrt(1 - rho_e)`` (dB) of two branches of envelope correlation
    ``rho_e`` (any shape): the usual approximation at 1 % outage with selection combining (Vaughan &
    Andersen), 10 dB for uncorrelated branches of equal power, 0 for fully correlated ones."""
    correlation = torch.as_tensor(correlation)
    return 10 * torch.sqrt((1 - correlation).clamp_min(0))


def coupling_db(s_matrix):
    """``20 log10 |S_ij|`` (dB), same shape as ``s_matrix``: off the diagonal the mutual coupling of the
    ports, on it their return loss (negated)."""
    return 20 * torch.log10(torch.as_tensor(s_matrix).abs())


__all__ = [
    "coupling_db",
    "diversity_gain",
    "envelope_correlation",
    "lossless_radiation_matrix",
    "radiation_matrix",
    "total_efficiency",
]
