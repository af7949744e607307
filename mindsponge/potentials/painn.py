"""PaiNN: polarizable atom interaction network (Schütt, Unke, Gastegger, ICML 2021).

Every atom carries invariant features ``s_i`` ``(F,)`` and equivariant vector features
``v_i`` ``(F, 3)`` (zero at the start). A message block mixes neighbours' features through
filters of the distance, along the unit vector ``u_ij`` for the vector channel::

    ds_i = sum_j  phi_s(s_j) W_s(r_ij)
    dv_i = sum_j  v_j phi_vv(s_j) W_vv(r_ij) + u_ij phi_vs(s_j) W_vs(r_ij)

and an update block couples the channels through ``U v_i``, ``V v_i`` and their norms and
scalar product (rotation invariant), so energies are invariant and forces equivariant. The
vector features are stored ``(N, 3, F)``, the channels last, so that the products with the
per-channel gates run over contiguous channels.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mindsponge.potentials.base import (
    DEFAULT_ELEMENTS,
    CosineCutoff,
    LearnedPotential,
    atom_readout,
    scatter_sum,
)

__all__ = ["PaiNN"]

_EPSILON = 1e-8  # inside the square root of vector norms: finite gradient at zero vectors


class _SineRBF(nn.Module):
    """``sin(n pi r / r_c) / (r / r_c)`` for ``n = 1..n_rbf`` (PaiNN's radial basis, made dimensionless
    by the cutoff so that its size does not depend on the length unit)."""

    def __init__(self, n_rbf: int, cutoff: float):
        super().__init__()
        self.cutoff = float(cutoff)
        self.register_buffer("frequencies", torch.arange(1, n_rbf + 1) * torch.pi / cutoff)

    def forward(self, distances: Tensor) -> Tensor:
        distances = distances.unsqueeze(-1)
        return torch.sin(self.frequencies.to(distances.dtype) * distances) * (self.cutoff / distances)


class _Message(nn.Module):
    def __init__(self, features: int, n_rbf: int):
        super().__init__()
        self.features = features
        self.scalar_network = nn.Sequential(nn.Linear(features, features), nn.SiLU(),
                                            nn.Linear(features, 3 * features))
        self.filter = nn.Linear(n_rbf, 3 * features)

    def forward(self, scalars, vectors, pairs, expanded, envelope, directions):
        target, source = pairs[:, 0], pairs[:, 1]
        neighbours = self.scalar_network(scalars).index_select(0, source)
        mixed = neighbours * self.filter(expanded) * envelope.unsqueeze(-1)
        gate_vv, delta_s, gate_vs = torch.split(mixed, self.features, dim=-1)
        delta_v = (vectors.index_select(0, source) * gate_vv.unsqueeze(1)
                   + directions.unsqueeze(-1) * gate_vs.unsqueeze(1))
        n_atoms = len(scalars)
        scalars = scalars + scatter_sum(delta_s, target, n_atoms)
        return scalars, vectors + scatter_sum(delta_v, target, n_atoms)


class _Update(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.features = features
        self.mix_u = nn.Linear(features, features, bias=False)
        self.mix_v = nn.Linear(features, features, bias=False)
        self.network = nn.Sequential(nn.Linear(2 * features, features), nn.SiLU(),
                                     nn.Linear(features, 3 * features))

    def forward(self, scalars: Tensor, vectors: Tensor):
        # vectors (N, 3, F): mix the F channels, keep the Cartesian axis
        u_vectors = self.mix_u(vectors)
        v_vectors = self.mix_v(vectors)
        v_norm = torch.sqrt((v_vectors * v_vectors).sum(1) + _EPSILON)
        gates = self.network(torch.cat([scalars, v_norm], dim=-1))
        a_vv, a_sv, a_ss = torch.split(gates, self.features, dim=-1)
        scalar_product = (u_vectors * v_vectors).sum(1)
        return scalars + a_ss + a_sv * scalar_product, vectors + a_vv.unsqueeze(1) * u_vectors


class PaiNN(LearnedPotential):
    """PaiNN equivariant learned potential.

    Args:
        cutoff: nm (default 0.5).
        features: width of the scalar and vector channels.
        interactions: number of message + update blocks.
        n_rbf: number of radial basis functions.
        elements: atomic numbers the model embeds.
        skin: neighbour-list skin for periodic or large systems, nm.

    Call: ``model(positions (N, 3) nm, atomic_numbers (N,), box=None, batch=None) -> energy``
    (kJ/mol; ``()`` or ``(M,)`` with ``batch``).
    """

    vanishes_beyond_cutoff = True  # the cosine cutoff multiplies every message

    def __init__(self, cutoff: float = 0.5, features: int = 64, interactions: int = 3, n_rbf: int = 20,
                 elements=DEFAULT_ELEMENTS, skin: float = 0.1):
        super().__init__(cutoff, elements, skin)
        self._record_hyperparameters(dict(features=features, interactions=interactions, n_rbf=n_rbf))
        self.features = features
        self.embedding = nn.Embedding(self.n_elements, features)
        self.rbf = _SineRBF(n_rbf, cutoff)
        self.envelope = CosineCutoff(cutoff)
        self.messages = nn.ModuleList(_Message(features, n_rbf) for _ in range(interactions))
        self.updates = nn.ModuleList(_Update(features) for _ in range(interactions))
        self.readout = atom_readout(features, nn.SiLU())

    def atomic_outputs(self, species: Tensor, pairs: Tensor, vectors: Tensor) -> Tensor:
        distances = vectors.norm(dim=-1)
        directions = vectors / distances.unsqueeze(-1)
        expanded, envelope = self.rbf(distances), self.envelope(distances)
        scalars = self.embedding(species)
        vector_features = scalars.new_zeros((len(species), 3, self.features))
        for message, update in zip(self.messages, self.updates, strict=True):
            scalars, vector_features = message(
                scalars, vector_features, pairs, expanded, envelope, directions)
            scalars, vector_features = update(scalars, vector_features)
        return self.readout(scalars).squeeze(-1)
