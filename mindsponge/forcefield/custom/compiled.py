"""Custom pair terms on the compiled expression kernel (``ExpressionPairTerm`` of :mod:`mindsponge._kernels`).

:class:`CompiledPairs` is what :class:`~.bonded.CustomBond` and :class:`~.nonbonded.CustomNonbonded`
share: their expression lowered to a program (:mod:`mindsponge.forcefield.expressions.program`)
that the kernel runs over the pairs, energy and ``dE/dr`` in one pass. The step loop
(:mod:`mindsponge.step_loop`) takes the kernel term from :meth:`CompiledPairs.compiled_terms`
(no Python call per step); the terms' own ``forward`` uses it too on CPU, with analytic forces
(autograd then only meets the result). Expressions the lowering cannot take (tabulated or
geometric functions), parameters that require grad, a box that requires grad, and
``compiled_expression = False`` keep the torch code.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from mindsponge import _kernels
from mindsponge.forcefield.custom.energy import ExpressionEnergy
from mindsponge.forcefield.expressions.program import lower_expression
from mindsponge.forcefield.pair_kernels import AnalyticEnergies


def expression_pair_term(kernels, expression: ExpressionEnergy, inputs: Mapping[str, tuple[int, int]],
                         first: Tensor, second: Tensor, *, pair_table: Tensor | None = None,
                         particle_table: Tensor | None = None, weights: Tensor | None = None,
                         cutoff: float | None = None, skin: float = 0.1, switch_distance: float | None = None,
                         periodic: bool = False, long_range: float = 0.0):
    """A ``kernels.ExpressionPairTerm`` evaluating ``expression`` of ``r`` on pairs, or ``None``.

    Args:
        kernels: the compiled module.
        expression: the term's :class:`~.energy.ExpressionEnergy` (global parameters at their
            current values become constants of the program).
        inputs: the expression's other variables, as ``(source, column)`` of ``pair_table``
            (source 0) or of ``particle_table`` at the pair's first (1) or second (2) atom.
        first, second: ``(P,)`` atom indices of the pairs; with a cutoff, the candidate pairs.
        pair_table: ``(P, K)`` per-pair values; particle_table: ``(N, K)`` per-atom values.
        weights: ``(P,)`` multiplicity of each pair, or ``None``.
        cutoff: nm, or ``None`` for every pair always; skin: nm, the kernel's Verlet list.
        switch_distance: nm, OpenMM's switching function from there to the cutoff, or ``None``.
        periodic: minimum-image differences in the box.
        long_range: kJ/mol nm^3, adds ``long_range / V`` (periodic).

    Returns:
        the kernel term, or ``None`` when the expression has no compiled form.
    """
    compiled = expression.compiled
    if compiled.functions or compiled.uses_box:
        return None
    program = lower_expression(expression.energy, "r", inputs, expression.global_parameters,
                               expression.context)
    if program is None:
        return None
    empty = torch.zeros((len(first), 0), dtype=torch.float64)
    spec = kernels.ExpressionPairSpec()
    spec.code, spec.values = program.code, program.values
    spec.registers, spec.result = program.registers, program.result
    spec.first, spec.second = first.cpu(), second.cpu()
    spec.pair_table = (empty if pair_table is None else pair_table).detach().cpu().double()
    spec.particle_table = (empty[:0] if particle_table is None else particle_table).detach().cpu().double()
    if weights is not None:
        spec.weights = weights.detach().cpu().double()
    spec.cutoff = 0.0 if cutoff is None else float(cutoff)
    spec.skin = float(skin)
    spec.switch_distance = -1.0 if switch_distance is None else float(switch_distance)
    spec.periodic, spec.long_range = bool(periodic), float(long_range)
    return kernels.ExpressionPairTerm(spec)


class CompiledPairs:
    """What a custom pair term needs to run on the expression kernel (a mixin of the term's module).

    Subclasses provide ``_expression_kernel_term(kernels)`` (the kernel term or ``None``),
    ``_kernel_key()`` (changes whenever the term's parameters do) and ``_torch_energy(positions,
    box)`` (the autograd formulation). ``compiled_expression = False`` on an instance keeps it on
    the torch code.
    """

    compiled_expression = True

    def compiled_terms(self, kernels, box: Tensor | None = None):
        """This term as force terms of the compiled step loop: ``[kernels.ExpressionPairTerm]``, or
        ``None`` where the torch code must be used (see the module docstring). ``box`` is not used."""
        if not self.compiled_expression or any(tensor.requires_grad for tensor in self._kernel_inputs()):
            return None
        term = self._expression_kernel_term(kernels)
        return None if term is None else [term]

    def _kernel_inputs(self) -> list[Tensor]:
        """The tensors the kernel term is built from (it is not used if any requires grad)."""
        return [*self.parameters(), *self.buffers()]

    def _expression_kernel_energy(self, positions: Tensor, box: Tensor | None) -> Tensor | None:
        """The energy from the kernel term (kept until the parameters change) with analytic forces, or
        ``None`` where the torch code must be used."""
        kernels = _kernels.usable(positions)
        if kernels is None or (box is not None and box.requires_grad):
            return None
        key = self._kernel_key()
        cache = self.__dict__.get("_kernel_term_cache")
        if cache is None or cache[0] != key:
            terms = self.compiled_terms(kernels)
            cache = self.__dict__["_kernel_term_cache"] = (key, None if terms is None else terms[0])
        if cache[1] is None:
            return None
        detached = positions.detach().contiguous()
        forces = torch.zeros_like(detached)
        frame_box = None if box is None else box.detach().to(detached).contiguous()
        energy = detached.new_tensor(cache[1].add_forces(detached, frame_box, forces))
        if not (torch.is_grad_enabled() and positions.requires_grad):
            return energy
        return AnalyticEnergies.apply(
            positions, [("forces", (energy, forces))], lambda again: (self._torch_energy(again, box),))[0]

    def __getstate__(self):
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__.copy()
        state = dict(state)
        state.pop("_kernel_term_cache", None)  # a compiled object: rebuilt on first use
        return state
