"""What every learned potential shares: elements, pairs, radial bases, energy statistics, batching.

A learned potential maps positions ``(N, 3)`` (nm) and atomic numbers ``(N,)`` to an energy in
kJ/mol. :class:`LearnedPotential` does everything that is not the network itself:

- **elements**: the atomic numbers the model can embed (``elements``) and those it was trained
  on (set by :meth:`LearnedPotential.fit_statistics`); any other atomic number raises
  :class:`UnknownElementError` naming the atom;
- **pairs**: the atom pairs closer than ``cutoff`` with their displacement vectors. Molecules
  without a box use all pairs of each molecule of a batch; a periodic box (or a large system)
  uses a :class:`~mindsponge.neighbors.NeighborList` kept across calls (cell list, Verlet skin)
  and the minimum image, so periodic images of an atom see the same environment. A network
  whose pair terms vanish with their derivatives beyond the cutoff (``vanishes_beyond_cutoff``:
  an envelope multiplies every pair's contribution; SchNet, PaiNN, ACENet) gets every pair of a
  single molecule of at most ``STATIC_PAIRS_UP_TO`` atoms without a box, a list fixed for that
  atom count and made once (no search, no filter, fixed shapes): the pairs beyond the cutoff add
  exact zeros, so the energy and forces are those of the filtered pairs to rounding;
- **energy statistics**: the network's per-atom outputs ``y_i`` become
  ``E = scale * sum_i y_i + sum_i shift[Z_i]``, with per-element shifts fitted by least squares
  on the reference energies and ``scale`` from the spread of the reference forces
  (:meth:`LearnedPotential.fit_statistics`), so the network learns numbers of order one;
- **batches**: ``batch`` gives the molecule index of every atom (sorted), the result is one
  energy per molecule;
- **replicas**: ``model.bind(atomic_numbers, replicas=R)`` runs ``R`` independent copies of one
  molecule as one system of ``R N`` atoms (positions ``(R N, 3)``, copy after copy, no box): the
  pairs of one copy, offset for each, are made once, and the energy is the sum over the copies.
  Replicas never interact, so a :class:`~mindsponge.simulation.Simulation` of them runs ``R``
  trajectories (umbrella windows, say) with one network call per step;
- **dtype**: positions are evaluated in the dtype of the model's parameters and the energy is
  returned in the dtype of the positions (``model.double()`` for float64 throughout).

Subclasses implement :meth:`LearnedPotential.atomic_outputs`, which gets the element indices,
the directed pairs and their displacements and returns ``y_i``.

To run a learned potential where a ``(positions, box) -> energy`` callable is expected (a
:class:`~mindsponge.simulation.Simulation`, :func:`mindsponge.forces`, a hybrid potential), bind
the atomic numbers: ``model.bind(system.atomic_numbers)`` returns a :class:`BoundPotential`.
"""

from __future__ import annotations

import math

import torch
from ase.data import chemical_symbols
from torch import Tensor, nn

from common import checks
from common.errors import ArgumentTypeError, ConfigurationError, DataError
from mindsponge import space
from mindsponge.elements import atomic_number as _atomic_number
from mindsponge.neighbors import NeighborList

__all__ = [
    "LearnedPotential", "BoundPotential", "UnknownElementError", "GaussianRBF", "CosineCutoff",
    "ShiftedSoftplus", "scatter_sum", "atom_readout", "DEFAULT_ELEMENTS", "STATIC_PAIRS_UP_TO",
]

# H, C, N, O, F, P, S, Cl: organic molecules and their usual heteroatoms
DEFAULT_ELEMENTS = (1, 6, 7, 8, 9, 15, 16, 17)
# systems with at least this many atoms use the cell-list neighbour list even without a box
ALL_PAIRS_BELOW = 256
# a single molecule of at most this many atoms without a box uses all its pairs, unfiltered, when the
# network's pair terms vanish beyond the cutoff (at most 2x the pairs of a compact molecule this size)
STATIC_PAIRS_UP_TO = 64


def _symbol(number: int) -> str:
    number = int(number)
    return chemical_symbols[number] if 0 < number < len(chemical_symbols) else f"Z={number}"


class UnknownElementError(DataError):
    """An atomic number the potential cannot embed or was not trained on."""


def scatter_sum(values: Tensor, index: Tensor, size: int) -> Tensor:
    """Sum rows of ``values`` ``(P, ...)`` into ``size`` rows by ``index`` ``(P,)`` (differentiable)."""
    out = values.new_zeros((size, *values.shape[1:]))
    return out.index_add(0, index, values)


class ShiftedSoftplus(nn.Module):
    """``softplus(x) - log 2`` (SchNet's activation: smooth, zero at zero)."""

    def forward(self, inputs: Tensor) -> Tensor:
        return nn.functional.softplus(inputs) - math.log(2.0)


class GaussianRBF(nn.Module):
    """Gaussian radial basis ``exp(-(r - mu_k)^2 / (2 w^2))`` on ``n`` centres in ``[0, cutoff]``.

    Args:
        n: number of basis functions.
        cutoff: nm.

    Shapes:
        distances ``(P,)`` nm -> ``(P, n)``.
    """

    def __init__(self, n: int, cutoff: float):
        super().__init__()
        self.register_buffer("centers", torch.linspace(0.0, cutoff, n))
        self.width = cutoff / max(n - 1, 1)

    def forward(self, distances: Tensor) -> Tensor:
        scaled = (distances.unsqueeze(-1) - self.centers.to(distances.dtype)) / self.width
        return torch.exp(-0.5 * scaled * scaled)


class CosineCutoff(nn.Module):
    """``0.5 (cos(pi r / r_c) + 1)`` for ``r < r_c``, else 0: goes smoothly to zero at the cutoff.

    Shapes:
        distances ``(P,)`` nm -> ``(P,)``.
    """

    def __init__(self, cutoff: float):
        super().__init__()
        self.cutoff = float(cutoff)

    def forward(self, distances: Tensor) -> Tensor:
        inside = (distances < self.cutoff).to(distances.dtype)
        return 0.5 * (torch.cos(distances * (math.pi / self.cutoff)) + 1.0) * inside


def atom_readout(features: int, activation: nn.Module) -> nn.Sequential:
    """The per-atom readout ``features -> features / 2 -> 1`` shared by the networks."""
    return nn.Sequential(nn.Linear(features, features // 2), activation, nn.Linear(features // 2, 1))


def _molecule_pairs(batch: Tensor) -> Tensor:
    """All pairs ``i < j`` within each molecule of a sorted batch index ``(N,)``: ``(P, 2)`` long."""
    n_atoms = len(batch)
    device = batch.device
    counts = torch.bincount(batch)
    ends = torch.cumsum(counts, 0)[batch]  # one past the last atom of each atom's molecule
    index = torch.arange(n_atoms, device=device)
    n_partners = ends - index - 1
    total = int(n_partners.sum())
    first = torch.repeat_interleave(index, n_partners, output_size=total)
    starts = torch.cumsum(n_partners, 0) - n_partners
    second = first + 1 + torch.arange(total, device=device) - torch.repeat_interleave(
        starts, n_partners, output_size=total)
    return torch.stack([first, second], dim=1)


class LearnedPotential(nn.Module):
    """Base class of learned potentials (see the module docstring).

    Args:
        cutoff: interaction cutoff, nm.
        elements: atomic numbers (or symbols) the model embeds.
        skin: Verlet skin of the neighbour list used with a box or for large systems, nm.

    Attributes:
        hyperparameters: the constructor arguments (used by :func:`mindsponge.potentials.load`).
        neighbors: the :class:`~mindsponge.neighbors.NeighborList` (periodic or large systems).
        vanishes_beyond_cutoff: class attribute, ``True`` when every pair's contribution to the
            energy and its derivatives are exactly zero beyond the cutoff (see the module
            docstring); subclasses that guarantee it set it.
        vectorisable: class attribute, ``True`` when models of the class run under
            :func:`torch.func.vmap` over stacked weights (a committee's vectorised evaluation).
        vectorise_max_pairs: class attribute, the largest graph (pairs) on which a committee of the
            class is evaluated by ``vmap``; on larger ones the models run one after the other on the
            shared graph, which is faster there (vmap's batched gathers and products outgrow the saved
            per-operation overhead; measured on CPU, see :mod:`mindsponge.active.committee`).
    """

    vanishes_beyond_cutoff = False
    vectorisable = True  # models of this class can be evaluated together by torch.func.vmap
    vectorise_max_pairs = 256

    def __init__(self, cutoff: float, elements=DEFAULT_ELEMENTS, skin: float = 0.1):
        super().__init__()
        if not (isinstance(cutoff, int | float) and math.isfinite(cutoff) and cutoff > 0):
            raise ConfigurationError(
                f"{type(self).__name__}: cutoff must be a positive number of nm, got {cutoff!r}")
        numbers = sorted({_atomic_number(e) if isinstance(e, str) else int(e) for e in elements})
        if not numbers or numbers[0] < 1:
            raise ConfigurationError(
                f"{type(self).__name__}: elements must be atomic numbers >= 1, got {elements!r}")
        self.cutoff = float(cutoff)
        self.elements = tuple(numbers)
        lookup = torch.full((max(numbers) + 1,), -1, dtype=torch.long)
        lookup[torch.tensor(numbers)] = torch.arange(len(numbers))
        self.register_buffer("element_index", lookup, persistent=False)
        # per-element energy shift (kJ/mol), energy scale (kJ/mol), elements seen in training
        self.register_buffer("element_shift", torch.zeros(len(numbers)))
        self.register_buffer("energy_scale", torch.ones(()))
        self.register_buffer("trained", torch.ones(len(numbers), dtype=torch.bool))
        self.neighbors = NeighborList(cutoff, skin=skin)
        self._all_pairs_cache: dict = {}  # (atom count, device) -> directed pairs of one molecule
        self.hyperparameters = {"cutoff": self.cutoff, "elements": self.elements, "skin": skin}

    def _record_hyperparameters(self, counts: dict, **others) -> None:
        """Record a model's hyperparameters; ``counts`` (features, interactions, basis sizes...) must be
        positive ints, refused naming the model and the argument otherwise."""
        for name, value in counts.items():
            checks.positive_int(value, f"{type(self).__name__}: {name}")
        self.hyperparameters.update(counts, **others)

    @property
    def n_elements(self) -> int:
        """Number of elements the model embeds."""
        return len(self.elements)

    @property
    def trained_elements(self) -> tuple[int, ...]:
        """Atomic numbers the model accepts (all of ``elements`` before :meth:`fit_statistics`)."""
        return tuple(z for z, seen in zip(self.elements, self.trained.tolist(), strict=True) if seen)

    # --- the part subclasses implement ---------------------------------------------------------
    def atomic_outputs(self, species: Tensor, pairs: Tensor, vectors: Tensor) -> Tensor:
        """Per-atom outputs ``y_i`` (dimensionless, order one).

        Args:
            species: ``(N,)`` long element indices (positions in ``elements``).
            pairs: ``(P, 2)`` long directed pairs ``(i, j)``, both directions of every pair closer
                than the cutoff.
            vectors: ``(P, 3)`` displacements ``x_j - x_i`` (minimum image), nm.

        Returns:
            ``(N,)`` tensor.
        """
        raise NotImplementedError

    # --- evaluation ------------------------------------------------------------------------------
    def species(self, atomic_numbers: Tensor) -> Tensor:
        """Element indices ``(N,)`` of atomic numbers ``(N,)``.

        Raises:
            UnknownElementError: an atomic number outside ``elements`` or not seen in training
                (the message names the first such atom).
        """
        atomic_numbers = torch.as_tensor(atomic_numbers, device=self.element_index.device)
        if atomic_numbers.is_floating_point() or atomic_numbers.ndim != 1:
            raise ConfigurationError(
                f"atomic_numbers must be an (N,) integer tensor, got {tuple(atomic_numbers.shape)} "
                f"{atomic_numbers.dtype}"
            )
        atomic_numbers = atomic_numbers.long()
        inside = (atomic_numbers >= 0) & (atomic_numbers < len(self.element_index))
        clamped = atomic_numbers.clamp(0, len(self.element_index) - 1)
        species = torch.where(inside, self.element_index[clamped], -1)
        known = species >= 0
        accepted = known & self.trained[species.clamp_min(0)]
        if not bool(accepted.all()):
            atom = int(torch.nonzero(~accepted)[0])
            number = int(atomic_numbers[atom])
            reason = ("was not in its training data" if bool(known[atom])
                      else f"is not among the elements it embeds {list(self.elements)}")
            raise UnknownElementError(
                f"{type(self).__name__}: atom {atom} has atomic number {number} ({_symbol(number)}), which "
                f"{reason}; it accepts {[f'{z} ({_symbol(z)})' for z in self.trained_elements]}"
            )
        return species

    def _all_pairs(self, n_atoms: int, device, replicas: int = 1) -> Tensor:
        """Every directed pair of ``n_atoms`` atoms ``(n (n - 1), 2)``: the pairs ``i < j`` in row
        order, then the same pairs reversed; with ``replicas``, those of each copy of the molecule
        in turn, offset by ``n_atoms`` per copy (made once per atom count, copies and device)."""
        key = (n_atoms, replicas, str(device))
        pairs = self._all_pairs_cache.get(key)
        if pairs is None:
            upper = torch.triu_indices(n_atoms, n_atoms, 1, device=device).T
            one = torch.cat([upper, upper.flip(1)])
            offsets = n_atoms * torch.arange(replicas, device=device)
            pairs = self._all_pairs_cache[key] = (one[None] + offsets[:, None, None]).reshape(-1, 2)
        return pairs

    def graph(self, positions: Tensor, box: Tensor | None = None,
              batch: Tensor | None = None, replicas: int = 1) -> tuple[Tensor, Tensor]:
        """Directed pairs within the cutoff ``(P, 2)`` long and their displacement vectors
        ``x_j - x_i`` ``(P, 3)`` nm (minimum image in a box), what :meth:`atomic_outputs` takes;
        for a small molecule and a network with ``vanishes_beyond_cutoff``: all pairs.

        Args:
            positions: ``(N, 3)`` nm, in the model's dtype; box: ``(3, 3)`` nm or ``None``;
            batch: ``(N,)`` sorted molecule indices or ``None`` (see :meth:`forward`);
            replicas: ``positions`` hold this many copies of one molecule, one after the other
                (no box, no batch; fewer than ``ALL_PAIRS_BELOW`` atoms per copy).

        Raises:
            ValueError: ``replicas`` with a box or a batch, or that do not divide the atoms.
        """
        n_atoms = len(positions)
        if replicas != 1:
            if box is not None or batch is not None or replicas < 1 or n_atoms % replicas:
                raise ConfigurationError(
                    f"replicas={replicas}: copies of one molecule without a box or batch, dividing the "
                    f"{n_atoms} atoms"
                )
            n_atoms //= replicas
            if n_atoms >= ALL_PAIRS_BELOW:
                raise ConfigurationError(
                    f"replicas: molecules of fewer than {ALL_PAIRS_BELOW} atoms, got {n_atoms}")
        if batch is None and box is None and n_atoms < ALL_PAIRS_BELOW:
            pairs = self._all_pairs(n_atoms, positions.device, replicas)
            vectors = positions.index_select(0, pairs[:, 1]) - positions.index_select(0, pairs[:, 0])
            if self.vanishes_beyond_cutoff and n_atoms <= STATIC_PAIRS_UP_TO:
                return pairs, vectors
            keep = (vectors * vectors).sum(-1) < self.cutoff**2
            return pairs[keep], vectors[keep]
        if batch is not None:
            pairs = _molecule_pairs(batch)
        else:
            pairs = self.neighbors.update(positions, box)
        vectors = space.minimum_image(positions[pairs[:, 1]] - positions[pairs[:, 0]], box)
        keep = (vectors * vectors).sum(-1) < self.cutoff**2
        pairs, vectors = pairs[keep], vectors[keep]
        return torch.cat([pairs, pairs.flip(1)]), torch.cat([vectors, -vectors])

    def forward(self, positions: Tensor, atomic_numbers: Tensor, box: Tensor | None = None,
                batch: Tensor | None = None) -> Tensor:
        """Potential energy.

        Args:
            positions: ``(N, 3)`` tensor, nm.
            atomic_numbers: ``(N,)`` integer tensor.
            box: ``(3, 3)`` tensor of box vectors (rows, reduced form), nm, or ``None``.
            batch: optional ``(N,)`` integer tensor, the molecule of every atom (sorted,
                ``0..M-1``); not combined with ``box``.

        Returns:
            ``()`` tensor in kJ/mol, or ``(M,)`` with ``batch``; in the dtype of ``positions``.

        Raises:
            ValueError: shapes that do not match (named), unsorted ``batch``, ``batch`` with ``box``.
            UnknownElementError: an atomic number the model does not accept.
        """
        if not isinstance(positions, Tensor) or positions.ndim != 2 or positions.shape[1] != 3:
            shape = tuple(positions.shape) if isinstance(positions, Tensor) else type(positions).__name__
            raise ConfigurationError(f"positions must be an (N, 3) tensor in nm, got {shape}")
        species = self.species(atomic_numbers)
        if len(species) != len(positions):
            raise ConfigurationError(
                f"atomic_numbers has {len(species)} entries but positions has {len(positions)} atoms"
            )
        if box is not None:
            if batch is not None:
                raise ConfigurationError(
                    "batch cannot be combined with box: evaluate periodic systems one at a time")
            space.check_box(box)
        if batch is not None:
            batch = torch.as_tensor(batch, device=positions.device).long()
            if batch.shape != (len(positions),):
                raise ConfigurationError(
                    f"batch must be an (N,) tensor with N={len(positions)}, got {tuple(batch.shape)}")
            if len(batch) and (bool((batch[1:] < batch[:-1]).any()) or int(batch[0]) < 0):
                raise ConfigurationError(
                    "batch must hold non-negative molecule indices sorted in ascending order")
        return self.species_energy(positions, species, box, batch)

    def species_energy(self, positions: Tensor, species: Tensor, box: Tensor | None = None,
                       batch: Tensor | None = None, replicas: int = 1) -> Tensor:
        """:meth:`forward` for checked inputs: element indices ``species`` ``(N,)`` from
        :meth:`species` instead of atomic numbers, nothing validated (what a
        :class:`BoundPotential` calls at every step); ``replicas`` as in :meth:`graph`.

        Returns:
            ``()`` tensor in kJ/mol (with ``replicas``: summed over the copies), or ``(M,)`` with
            ``batch``; in the dtype of ``positions``.
        """
        dtype = self.energy_scale.dtype
        compute_positions = positions.to(dtype)
        compute_box = None if box is None else box.to(dtype)
        pairs, vectors = self.graph(compute_positions, compute_box, batch, replicas)
        if batch is None:
            return self.pair_energy(species, pairs, vectors).to(positions.dtype)
        n_molecules = int(batch[-1]) + 1 if len(batch) else 0
        atomic_energies = self._atomic_energies(species, pairs, vectors)
        return scatter_sum(atomic_energies, batch, n_molecules).to(positions.dtype)

    def _atomic_energies(self, species: Tensor, pairs: Tensor, vectors: Tensor) -> Tensor:
        """``scale * y_i + shift[Z_i]`` ``(N,)`` kJ/mol."""
        return self.energy_scale * self.atomic_outputs(species, pairs, vectors) + self.element_shift[species]

    def pair_energy(self, species: Tensor, pairs: Tensor, vectors: Tensor) -> Tensor:
        """The energy ``()`` kJ/mol of one molecule given its graph (in the model's dtype).

        Args:
            species: ``(N,)`` element indices (:meth:`species`).
            pairs: ``(P, 2)`` directed pairs, ``vectors``: ``(P, 3)`` displacements ``x_j - x_i``,
                nm, as :meth:`atomic_outputs` takes them.
        """
        return self._atomic_energies(species, pairs, vectors).sum()

    # --- statistics ------------------------------------------------------------------------------
    @torch.no_grad()
    def fit_statistics(self, energies: Tensor, atomic_numbers: Tensor, batch: Tensor,
                       forces: Tensor | None = None) -> None:
        """Fit per-element energy shifts and the energy scale to reference data; mark the trained elements.

        The shifts solve ``min || E_m - sum_{i in m} shift[Z_i] ||`` by least squares (with
        several compositions this is the atomisation-like reference per element; with one
        composition, the minimum-norm solution). The scale is the RMS of the reference force
        components times 0.1 nm (a typical bond-length change), or the standard deviation of
        the energy residuals per atom without forces.

        Args:
            energies: ``(M,)`` reference energies, kJ/mol.
            atomic_numbers: ``(N,)`` integers of all atoms of the ``M`` molecules.
            batch: ``(N,)`` molecule index of every atom.
            forces: optional ``(N, 3)`` reference forces, kJ/mol/nm.
        """
        numbers = torch.as_tensor(atomic_numbers).long().cpu()
        present = sorted(set(numbers.tolist()))
        unknown = [z for z in present if z >= len(self.element_index) or int(self.element_index[z]) < 0]
        if unknown:
            raise UnknownElementError(
                f"{type(self).__name__}: the data holds atomic numbers {unknown} "
                f"({[_symbol(z) for z in unknown]}), which are not among the elements it embeds "
                f"{list(self.elements)}; pass elements=... to the constructor"
            )
        species = self.element_index.cpu()[numbers]
        batch = torch.as_tensor(batch).long().cpu()
        energies = torch.as_tensor(energies, dtype=torch.float64).cpu().reshape(-1)
        counts = torch.zeros(len(energies), self.n_elements, dtype=torch.float64)
        counts.index_put_((batch, species), torch.ones(len(batch), dtype=torch.float64), accumulate=True)
        shifts = torch.linalg.lstsq(counts, energies.unsqueeze(1), driver="gelsd").solution.squeeze(1)
        if forces is not None:
            scale = 0.1 * float(torch.as_tensor(forces, dtype=torch.float64).pow(2).mean().sqrt())
        else:
            residual = (energies - counts @ shifts) / counts.sum(1)
            scale = float(residual.std()) if len(residual) > 1 else 1.0
        trained = torch.zeros(self.n_elements, dtype=torch.bool)
        trained[species.unique()] = True
        shifts = torch.where(trained, shifts, torch.zeros_like(shifts))
        self.element_shift.copy_(shifts.to(self.element_shift))
        self.energy_scale.fill_(scale if scale > 0 else 1.0)
        self.trained.copy_(trained.to(self.trained.device))

    def bind(self, atomic_numbers, replicas: int = 1) -> BoundPotential:
        """This potential with fixed atomic numbers, called as ``(positions, box) -> energy``.

        Args:
            atomic_numbers: ``(N,)`` integers, e.g. ``system.atomic_numbers``.
            replicas: run this many independent copies of the molecule as one system (see the
                module docstring; :func:`mindsponge.replicas.replicate` builds their System).
        """
        return BoundPotential(self, atomic_numbers, replicas=replicas)

    def extra_repr(self) -> str:
        return f"cutoff={self.cutoff}, elements={list(self.elements)}"


class BoundPotential(nn.Module):
    """A learned potential with its atomic numbers bound: ``forward(positions, box) -> energy``.

    This is the signature of :class:`~mindsponge.forcefield.ForceField`, so a bound potential
    runs in :class:`~mindsponge.simulation.Simulation`, :func:`mindsponge.forces`, a
    :class:`~mindsponge.potentials.SumPotential` and the ASE calculator::

        sim = ms.Simulation(system, model.bind(system.atomic_numbers), integrator)

    Args:
        model: a :class:`LearnedPotential`.
        atomic_numbers: ``(N,)`` integers (checked against the model now).
        name: the name under which :meth:`energy_terms` reports the energy (default: the
            model's class name).
        replicas: independent copies of the molecule, one after the other in the positions
            (``(replicas N, 3)``, no box; the energy is their sum). ``atomic_numbers`` are then
            those of all copies, ``replicas N``.
    """

    def __init__(self, model: LearnedPotential, atomic_numbers, name: str | None = None, replicas: int = 1):
        super().__init__()
        if not isinstance(model, LearnedPotential):
            raise ArgumentTypeError(f"model must be a LearnedPotential, got {type(model).__name__}")
        checks.positive_int(replicas, "replicas")
        atomic_numbers = torch.as_tensor(atomic_numbers).long()
        species = model.species(atomic_numbers)  # raises now for an element the model does not accept
        self.model = model
        self.name = name if name is not None else type(model).__name__
        self.replicas = replicas
        self.register_buffer("atomic_numbers", atomic_numbers.repeat(replicas), persistent=False)
        self.register_buffer("species", species.repeat(replicas), persistent=False)

    def replicated(self, count: int) -> BoundPotential:
        """The same model bound to ``count`` copies of this potential's molecule (see ``replicas``)."""
        molecule = self.atomic_numbers[: len(self.atomic_numbers) // self.replicas]
        return BoundPotential(self.model, molecule, self.name, replicas=count)

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        """Energy ``()`` in kJ/mol of positions ``(N, 3)`` nm in ``box`` ``(3, 3)`` nm or ``None``.

        The atomic numbers were checked when bound: a call checks the shapes and goes straight to
        :meth:`LearnedPotential.species_energy`.

        Raises:
            ValueError: positions that are not ``(N, 3)`` for the bound atoms (or a bad box, or a
                box with replicas).
        """
        if not isinstance(positions, Tensor) or positions.shape != (len(self.species), 3):
            shape = tuple(positions.shape) if isinstance(positions, Tensor) else type(positions).__name__
            raise ConfigurationError(
                f"{self.name}: positions must be ({len(self.species)}, 3) nm for the bound "
                             f"atoms, got {shape}")
        if box is not None:
            space.check_box(box)
        return self.model.species_energy(positions, self.species, box, replicas=self.replicas)

    def energy_terms(self, positions: Tensor, box: Tensor | None = None) -> dict[str, Tensor]:
        """``{name: energy}`` (kJ/mol), as :meth:`ForceField.energy_terms`."""
        return {self.name: self(positions, box)}
