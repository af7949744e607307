"""MolCT: molecular configuration transformer (Zhang, Liu, Gao, J. Chem. Theory Comput. 2021; MindSPONGE).

Atoms attend to their neighbours within the cutoff. Multi-head attention in each block uses a
distance encoding ``g(r_ij)`` (Gaussians through a linear layer) on both keys and values::

    a_ij = q_i . (k_j * g_k(r_ij)) / sqrt(d)          (per head)
    w_ij = c(r_ij) exp(a_ij) / (exp(a_ii) + sum_k c(r_ik) exp(a_ik))
    x_i <- LayerNorm(x_i + W_o (w_ii v_i + sum_j w_ij v_j * g_v(r_ij)))
    x_i <- LayerNorm(x_i + FFN(x_i))

The atom attends to itself (``r = 0``) as in the transformer, and the cosine cutoff ``c`` in
the weights makes them go to zero continuously at the cutoff, so the energy is smooth.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from common.errors import ConfigurationError
from mindsponge.potentials.base import (
    DEFAULT_ELEMENTS,
    CosineCutoff,
    GaussianRBF,
    LearnedPotential,
    atom_readout,
    scatter_sum,
)

__all__ = ["MolCT"]


class _AttentionBlock(nn.Module):
    def __init__(self, features: int, heads: int, n_rbf: int):
        super().__init__()
        if features % heads:
            raise ConfigurationError(f"MolCT: features ({features}) must be a multiple of heads ({heads})")
        self.heads, self.head_features = heads, features // heads
        self.query_key_value = nn.Linear(features, 3 * features, bias=False)
        self.distance_key = nn.Linear(n_rbf, features)
        self.distance_value = nn.Linear(n_rbf, features)
        self.output = nn.Linear(features, features)
        self.norm_attention = nn.LayerNorm(features)
        self.feed_forward = nn.Sequential(nn.Linear(features, 2 * features), nn.SiLU(),
                                          nn.Linear(2 * features, features))
        self.norm_feed_forward = nn.LayerNorm(features)

    def forward(self, features, pairs, expanded, envelope, self_expanded):
        n_atoms, heads, width = len(features), self.heads, self.head_features
        query, key, value = torch.split(self.query_key_value(features), features.shape[1], dim=-1)
        query, key, value = (t.reshape(n_atoms, heads, width) for t in (query, key, value))
        target, source = pairs[:, 0], pairs[:, 1]
        pair_key = key[source] * self.distance_key(expanded).reshape(-1, heads, width)
        pair_value = value[source] * self.distance_value(expanded).reshape(-1, heads, width)
        self_key = key * self.distance_key(self_expanded).reshape(1, heads, width)
        self_value = value * self.distance_value(self_expanded).reshape(1, heads, width)
        scale = 1.0 / math.sqrt(width)
        pair_logits = (query[target] * pair_key).sum(-1) * scale  # (P, H)
        self_logits = (query * self_key).sum(-1) * scale  # (N, H)
        # a per-atom constant shift (the largest logit) cancels in the weights: numerical safety only
        largest = self_logits.detach().scatter_reduce(
            0, target.unsqueeze(-1).expand_as(pair_logits), pair_logits.detach(), "amax")
        pair_weights = torch.exp(pair_logits - largest[target]) * envelope.unsqueeze(-1)
        self_weights = torch.exp(self_logits - largest)
        normaliser = self_weights + scatter_sum(pair_weights, target, n_atoms)
        attended = self_weights.unsqueeze(-1) * self_value + scatter_sum(
            pair_weights.unsqueeze(-1) * pair_value, target, n_atoms)
        attended = (attended / normaliser.unsqueeze(-1)).reshape(n_atoms, heads * width)
        features = self.norm_attention(features + self.output(attended))
        return self.norm_feed_forward(features + self.feed_forward(features))


class MolCT(LearnedPotential):
    """MolCT learned potential (attention over neighbours with distance encodings).

    Args:
        cutoff: nm (default 0.5).
        features: atom feature width.
        interactions: number of attention blocks.
        heads: attention heads (``features`` must be a multiple).
        n_rbf: number of Gaussians encoding distances.
        elements: atomic numbers the model embeds.
        skin: neighbour-list skin for periodic or large systems, nm.

    Call: ``model(positions (N, 3) nm, atomic_numbers (N,), box=None, batch=None) -> energy``
    (kJ/mol; ``()`` or ``(M,)`` with ``batch``).
    """

    def __init__(self, cutoff: float = 0.5, features: int = 64, interactions: int = 3, heads: int = 8,
                 n_rbf: int = 20, elements=DEFAULT_ELEMENTS, skin: float = 0.1):
        super().__init__(cutoff, elements, skin)
        self._record_hyperparameters(
            dict(features=features, interactions=interactions, heads=heads, n_rbf=n_rbf))
        self.embedding = nn.Embedding(self.n_elements, features)
        self.rbf = GaussianRBF(n_rbf, cutoff)
        self.envelope = CosineCutoff(cutoff)
        self.blocks = nn.ModuleList(_AttentionBlock(features, heads, n_rbf) for _ in range(interactions))
        self.readout = atom_readout(features, nn.SiLU())

    def atomic_outputs(self, species: Tensor, pairs: Tensor, vectors: Tensor) -> Tensor:
        distances = vectors.norm(dim=-1)
        expanded, envelope = self.rbf(distances), self.envelope(distances)
        self_expanded = self.rbf(distances.new_zeros(1))
        features = self.embedding(species)
        for block in self.blocks:
            features = block(features, pairs, expanded, envelope, self_expanded)
        return self.readout(features).squeeze(-1)
