"""SchNet: continuous-filter convolutions over neighbours (Schütt et al., J. Chem. Phys. 148, 241722, 2018).

Each atom starts from an embedding of its element. An interaction block updates it with a
convolution whose filter is a network of the interatomic distance (expanded in Gaussians and
multiplied by a cosine cutoff, so energies are smooth at the cutoff)::

    x_i <- x_i + Dense(ssp(Dense( sum_j  W(r_ij) * Dense(x_j) )))

A two-layer readout maps each atom's features to ``y_i``; the energy is
``scale * sum_i y_i + sum_i shift[Z_i]`` (see :class:`~mindsponge.potentials.LearnedPotential`).
Invariant to rotations, translations and permutations by construction.

Example::

    model = SchNet(cutoff=0.5)
    energy = model(positions, atomic_numbers)        # () kJ/mol
"""

from __future__ import annotations

from torch import Tensor, nn

from mindsponge.potentials.base import (
    DEFAULT_ELEMENTS,
    CosineCutoff,
    GaussianRBF,
    LearnedPotential,
    ShiftedSoftplus,
    atom_readout,
    scatter_sum,
)

__all__ = ["SchNet"]


class _Interaction(nn.Module):
    """One SchNet interaction block (cfconv with a filter network, then an atom-wise update)."""

    def __init__(self, features: int, filters: int, n_rbf: int):
        super().__init__()
        self.filter_network = nn.Sequential(nn.Linear(n_rbf, filters), ShiftedSoftplus(),
                                            nn.Linear(filters, filters))
        self.in_to_filter = nn.Linear(features, filters, bias=False)
        self.update = nn.Sequential(nn.Linear(filters, features), ShiftedSoftplus(),
                                    nn.Linear(features, features))

    def forward(self, features: Tensor, pairs: Tensor, expanded: Tensor, envelope: Tensor) -> Tensor:
        weights = self.filter_network(expanded) * envelope.unsqueeze(-1)
        messages = self.in_to_filter(features).index_select(0, pairs[:, 1]) * weights
        return features + self.update(scatter_sum(messages, pairs[:, 0], len(features)))


class SchNet(LearnedPotential):
    """SchNet learned potential.

    Args:
        cutoff: nm (default 0.5).
        features: atom feature width.
        interactions: number of interaction blocks.
        n_rbf: number of Gaussians expanding the distance.
        filters: filter width (default: ``features``).
        elements: atomic numbers the model embeds.
        skin: neighbour-list skin for periodic or large systems, nm.

    Call: ``model(positions (N, 3) nm, atomic_numbers (N,), box=None, batch=None) -> energy``
    (kJ/mol; ``()`` or ``(M,)`` with ``batch``).
    """

    vectorise_max_pairs = 1024  # scalar features: vmap pays off on larger graphs than PaiNN's
    vanishes_beyond_cutoff = True  # the cosine cutoff multiplies every filter

    def __init__(self, cutoff: float = 0.5, features: int = 64, interactions: int = 3, n_rbf: int = 20,
                 filters: int | None = None, elements=DEFAULT_ELEMENTS, skin: float = 0.1):
        super().__init__(cutoff, elements, skin)
        filters = features if filters is None else filters
        self._record_hyperparameters(
            dict(features=features, interactions=interactions, n_rbf=n_rbf, filters=filters))
        self.embedding = nn.Embedding(self.n_elements, features)
        self.rbf = GaussianRBF(n_rbf, cutoff)
        self.envelope = CosineCutoff(cutoff)
        self.interactions = nn.ModuleList(_Interaction(features, filters, n_rbf) for _ in range(interactions))
        self.readout = atom_readout(features, ShiftedSoftplus())

    def atomic_outputs(self, species: Tensor, pairs: Tensor, vectors: Tensor) -> Tensor:
        distances = vectors.norm(dim=-1)
        expanded, envelope = self.rbf(distances), self.envelope(distances)
        features = self.embedding(species)
        for interaction in self.interactions:
            features = interaction(features, pairs, expanded, envelope)
        return self.readout(features).squeeze(-1)
