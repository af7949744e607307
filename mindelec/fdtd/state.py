"""The state a Yee step advances: fields, CPML auxiliary fields, incident lines, polarisations.

:class:`YeeState` holds every tensor of a run's state in typed containers (no string keys). A run
starts from :meth:`YeeStepper.initial_state <mindelec.fdtd.updates.YeeStepper.initial_state>`;
:meth:`YeeState.tensors` and :meth:`YeeState.with_tensors` flatten it to a list of tensors and back, in a
fixed order, for the time segments of a differentiable run and for restart files
(:mod:`~mindelec.fdtd.restart`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch


class CpmlKey(NamedTuple):
    """Which CPML auxiliary field: the updated ``component``, the derivative ``axis`` (0-2), the slab
    ``side`` (``"left"`` at ``-size/2``, ``"right"`` at ``+size/2``)."""

    component: str
    axis: int
    side: str


@dataclass
class YeeState:
    """Every tensor a step reads and writes.

    Attributes:
        fields: ``{component: (nx, ny, nz) tensor}`` for the simulated components (E at ``n dt``,
            H at ``(n - 1/2) dt``).
        psi: ``{CpmlKey: tensor}``, the CPML auxiliary fields on the PML slabs (``thickness`` cells
            along the key's axis, the grid shape along the others).
        incident_e, incident_h: per plane wave, the E and H of its auxiliary line, ``(length,)``.
        polarization, previous_polarization: ``{E component: [P per pole]}``, the dispersive
            polarisations ``P^n`` and ``P^(n-1)`` (grid shape).
    """

    fields: dict[str, torch.Tensor]
    psi: dict[CpmlKey, torch.Tensor]
    incident_e: list[torch.Tensor]
    incident_h: list[torch.Tensor]
    polarization: dict[str, list[torch.Tensor]]
    previous_polarization: dict[str, list[torch.Tensor]]

    def copy(self) -> YeeState:
        """A state with new containers holding the same tensors."""
        return YeeState(
            dict(self.fields),
            dict(self.psi),
            list(self.incident_e),
            list(self.incident_h),
            {key: list(value) for key, value in self.polarization.items()},
            {key: list(value) for key, value in self.previous_polarization.items()},
        )

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor, in a fixed order (that of :meth:`with_tensors`)."""
        tensors = [*self.fields.values(), *self.psi.values(), *self.incident_e, *self.incident_h]
        for poles in (*self.polarization.values(), *self.previous_polarization.values()):
            tensors.extend(poles)
        return tensors

    def with_tensors(self, tensors) -> YeeState:
        """A state of the same structure holding ``tensors`` (as :meth:`tensors` orders them)."""
        values = iter(tensors)

        def take(keys):
            return {key: next(values) for key in keys}

        fields, psi = take(self.fields), take(self.psi)
        incident_e = [next(values) for _ in self.incident_e]
        incident_h = [next(values) for _ in self.incident_h]
        polarization = {key: [next(values) for _ in poles] for key, poles in self.polarization.items()}
        previous = {key: [next(values) for _ in poles] for key, poles in self.previous_polarization.items()}
        return YeeState(fields, psi, incident_e, incident_h, polarization, previous)
