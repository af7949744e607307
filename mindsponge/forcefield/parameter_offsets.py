"""Global parameters and parameter offsets of a non-bonded term (OpenMM ``NonbondedForce``'s).

OpenMM lets a ``NonbondedForce`` scale parameters by global (context) parameters: every
particle and every exception has base parameters, and each *offset* adds a global parameter
times a scale to one of them::

    q_i     = q_i^0     + sum_o  p_o dq_o          (particle offsets of particle i)
    sigma_i = sigma_i^0 + sum_o  p_o dsigma_o
    eps_i   = eps_i^0   + sum_o  p_o deps_o
    qq_ij   = qq_ij^0   + sum_o  p_o dqq_o         (exception offsets of exception ij)
    ...

This is how openmmtools' ``AbsoluteAlchemicalFactory`` scales the charges of an alchemical region
by ``lambda_electrostatics`` under PME (its "exact" treatment): the region's charges are zero with
an offset of ``q_i`` per ``lambda_electrostatics``, so the direct, exception, exclusion and
reciprocal-space parts all see ``lambda q_i``.

:class:`ParameterOffsets` holds the base values, the offsets and the current values of the global
parameters, and writes the effective parameters into the term's buffers (in place, so that the
term's caches, keyed on the buffers' versions, see the change) whenever a parameter is set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from common.errors import ConfigurationError, UnknownNameError

__all__ = ["ParameterOffsets"]


def _offset_table(offsets, names: list[str], count: int, what: str,
                  context: str) -> tuple[Tensor, Tensor, Tensor]:
    """``(parameter index (O,), item index (O,), scales (O, 3))`` of offset rows
    ``(parameter name, item index, scale, scale, scale)``."""
    rows = list(offsets or ())
    parameters, items, scales = [], [], []
    for row in rows:
        if len(row) != 5:
            raise ConfigurationError(
                f"{context}: a {what} offset must be (parameter name, {what} index, 3 scales), got {row!r}")
        name, item, *values = row
        if name not in names:
            raise UnknownNameError(
                f"{context}: {what} offset uses global parameter {name!r}, which is not one of {names}")
        if not 0 <= int(item) < count:
            raise ConfigurationError(f"{context}: {what} offset names {what} {item}, outside [0, {count})")
        parameters.append(names.index(name))
        items.append(int(item))
        scales.append([float(value) for value in values])
    return (torch.tensor(parameters, dtype=torch.long), torch.tensor(items, dtype=torch.long),
            torch.tensor(scales, dtype=torch.float64).reshape(-1, 3))


class ParameterOffsets(nn.Module):
    """Global parameters with particle and exception parameter offsets (see the module docstring).

    Args:
        global_parameters: name to default value (as ``NonbondedForce.addGlobalParameter``).
        particles: ``(N, 3)`` base ``(charge e, sigma nm, epsilon kJ/mol)`` of every particle.
        exceptions: ``(X, 3)`` base ``(charge product e^2, sigma nm, epsilon kJ/mol)`` of every exception.
        particle_offsets: rows ``(parameter name, particle index, charge scale, sigma scale,
            epsilon scale)`` (``NonbondedForce.addParticleParameterOffset``).
        exception_offsets: rows ``(parameter name, exception index, charge-product scale, sigma
            scale, epsilon scale)``; the index is into ``exceptions``.
        context: what the offsets belong to, for error messages.

    Raises:
        ConfigurationError: a malformed offset or an index out of range.
        UnknownNameError: an offset that uses an undeclared global parameter.
    """

    def __init__(self, global_parameters: Mapping[str, float], particles: Tensor, exceptions: Tensor,
                 particle_offsets: Sequence = (), exception_offsets: Sequence = (),
                 context: str = "Nonbonded"):
        super().__init__()
        self.names = [str(name) for name in global_parameters]
        self.context = context
        self.register_buffer("values", torch.tensor([float(v) for v in global_parameters.values()],
                                                    dtype=torch.float64))
        self.register_buffer("particles", particles.detach().to(torch.float64).clone())
        self.register_buffer("exceptions", exceptions.detach().to(torch.float64).clone().reshape(-1, 3))
        tables = (_offset_table(particle_offsets, self.names, len(particles), "particle", context),
                  _offset_table(exception_offsets, self.names, len(self.exceptions), "exception", context))
        for prefix, (parameter, item, scales) in zip(("particle", "exception"), tables):
            self.register_buffer(f"{prefix}_parameter", parameter)
            self.register_buffer(f"{prefix}_item", item)
            self.register_buffer(f"{prefix}_scales", scales)

    @property
    def global_parameters(self) -> dict[str, float]:
        """Current values of the global parameters, by name."""
        return dict(zip(self.names, self.values.tolist()))

    @property
    def changes_lennard_jones(self) -> bool:
        """Whether any offset changes a particle's sigma or epsilon (the dispersion correction then
        depends on the global parameters)."""
        return bool((self.particle_scales[:, 1:] != 0).any())

    def set(self, name: str, value: float) -> None:
        """Set global parameter ``name`` to ``value`` (call :meth:`effective` for the new parameters).

        Raises:
            UnknownNameError: ``name`` is not a global parameter of this term.
        """
        if name not in self.names:
            raise UnknownNameError(f"{self.context}: no global parameter {name!r}; it has {self.names}")
        with torch.no_grad():
            self.values[self.names.index(name)] = float(value)

    def effective(self) -> tuple[Tensor, Tensor]:
        """The parameters at the current global values: particles ``(N, 3)`` and exceptions ``(X, 3)``,
        float64, in the column order of the base values."""
        values = self.values.to(torch.float64)
        particles = self.particles.to(torch.float64).clone()
        scales = self.particle_scales.to(torch.float64)
        particles.index_add_(0, self.particle_item, values[self.particle_parameter, None] * scales)
        exceptions = self.exceptions.to(torch.float64).clone()
        scales = self.exception_scales.to(torch.float64)
        exceptions.index_add_(0, self.exception_item, values[self.exception_parameter, None] * scales)
        return particles, exceptions

    def write_to(self, term) -> None:
        """Write the effective parameters into the buffers of a
        :class:`~mindsponge.forcefield.nonbonded.Nonbonded` ``term`` (in place)."""
        particles, exceptions = self.effective()
        with torch.no_grad():
            for index, name in enumerate(("charges", "sigma", "epsilon")):
                getattr(term, name).copy_(particles[:, index])
            for index, name in enumerate(("charge_products", "sigma", "epsilon")):
                getattr(term, f"exception_{name}").copy_(exceptions[:, index])

    def extra_repr(self) -> str:
        return (f"global_parameters={self.global_parameters}, particle_offsets={len(self.particle_item)}, "
                f"exception_offsets={len(self.exception_item)}")
