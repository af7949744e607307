"""ACENet: an equivariant many-body potential in the style of MACE (Batatia et al., NeurIPS 2022).

Every message-passing layer builds, for every atom ``i`` and channel ``k``, the *atomic basis*
(the atomic cluster expansion's one-particle sums) from its neighbours ``j`` within the cutoff::

    A0_ik = sum_j R0_k(r_ij) h_jk                            (scalar,        l = 0)
    A1_ik = sum_j R1_k(r_ij) h_jk u_ij                       (vector,        l = 1)
    A2_ik = sum_j R2_k(r_ij) h_jk (u_ij u_ij^T - I / 3)      (traceless symmetric tensor, l = 2)

with ``u_ij`` the unit vector from ``i`` to ``j`` (the Cartesian form of the spherical harmonics
of degree 0, 1, 2), radial functions ``R_lk`` an MLP of a Bessel basis
``sin(n pi r / r_c) / (r / r_c)`` times a smooth polynomial envelope that vanishes with two
derivatives at the cutoff, and ``h_jk`` the neighbour's features. The channels of each ``A_l``
are mixed linearly (equivariant: the Cartesian axes are untouched). The higher body order comes
from symmetric tensor products of the atomic basis contracted to invariants, per channel, up to
``correlation`` factors (body order ``correlation + 1``)::

    order 1:  A0
    order 2:  A0^2,  |A1|^2,  |A2|^2
    order 3:  A0^3,  A0 |A1|^2,  A0 |A2|^2,  A1 . A2 A1,  tr(A2^3)

(with ``max_l = 1`` the terms holding ``A2`` are left out). Their combination, with weights that
depend on the central atom's element, is the message; the features are updated with a linear
skip connection, and every layer adds its readout to the atomic output (a linear readout, a
small MLP for the last layer), as in MACE. The energy is invariant under rotations,
translations and permutations of like atoms by construction, and the forces (``-dE/dx`` by
autograd) equivariant. The atomic basis is stored with the channels last (``A1`` ``(N, 3, F)``,
``A2`` ``(N, 3, 3, F)``), so that products with per-channel weights run over contiguous channels.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from common.errors import ConfigurationError
from mindsponge.potentials.base import DEFAULT_ELEMENTS, LearnedPotential, atom_readout, scatter_sum

__all__ = ["ACENet", "BesselBasis", "PolynomialEnvelope"]


class BesselBasis(nn.Module):
    """``sin(n pi r / r_c) / (r / r_c)`` for ``n = 1..n`` (dimensionless).

    Shapes:
        distances ``(P,)`` nm -> ``(P, n)``.
    """

    def __init__(self, n: int, cutoff: float):
        super().__init__()
        self.cutoff = float(cutoff)
        self.register_buffer("frequencies", torch.arange(1, n + 1) * math.pi)

    def forward(self, distances: Tensor) -> Tensor:
        scaled = (distances / self.cutoff).unsqueeze(-1)
        return torch.sin(self.frequencies.to(distances.dtype) * scaled) / scaled


class PolynomialEnvelope(nn.Module):
    """``1 - (p+1)(p+2)/2 x^p + p(p+2) x^(p+1) - p(p+1)/2 x^(p+2)`` with ``x = r / r_c``, 0 beyond
    the cutoff: the envelope, its first and second derivatives vanish at ``r_c`` (DimeNet, MACE).

    Shapes:
        distances ``(P,)`` nm -> ``(P,)``.
    """

    def __init__(self, cutoff: float, power: int = 6):
        super().__init__()
        self.cutoff, self.power = float(cutoff), int(power)

    def forward(self, distances: Tensor) -> Tensor:
        p = self.power
        x = distances / self.cutoff
        value = (1.0 - (p + 1) * (p + 2) / 2 * x**p + p * (p + 2) * x ** (p + 1)
                 - p * (p + 1) / 2 * x ** (p + 2))
        return value * (x < 1.0).to(distances.dtype)


def _invariants(a0: Tensor, a1: Tensor, a2: Tensor | None, correlation: int) -> list[Tensor]:
    """The rotation invariants of the atomic basis up to ``correlation`` factors, each ``(N, F)``.

    ``a0`` ``(N, F)``, ``a1`` ``(N, 3, F)``, ``a2`` ``(N, 3, 3, F)`` or ``None`` (``max_l = 1``).
    """
    invariants = [a0]
    square1 = (a1 * a1).sum(1)
    square2 = None if a2 is None else (a2 * a2).sum((1, 2))
    if correlation >= 2:
        invariants += [a0 * a0, square1] + ([] if a2 is None else [square2])
    if correlation >= 3:
        invariants += [a0 * a0 * a0, a0 * square1]
        if a2 is not None:
            invariants += [a0 * square2, torch.einsum("naf,nabf,nbf->nf", a1, a2, a1),
                           torch.einsum("nabf,nbcf,ncaf->nf", a2, a2, a2)]
    return invariants


def _n_invariants(max_l: int, correlation: int) -> int:
    return len(_invariants(torch.zeros(1, 1), torch.zeros(1, 3, 1),
                           torch.zeros(1, 3, 3, 1) if max_l == 2 else None, correlation))


class _Layer(nn.Module):
    """One message-passing layer: atomic basis, channel mixing, invariant products, update."""

    def __init__(self, features: int, n_basis: int, n_elements: int, max_l: int, correlation: int,
                 neighbours: float):
        super().__init__()
        self.features, self.max_l, self.correlation = features, max_l, correlation
        self.neighbours = float(neighbours)
        self.neighbour_features = nn.Linear(features, features, bias=False)
        self.radial = nn.Sequential(nn.Linear(n_basis, 64), nn.SiLU(), nn.Linear(64, 64), nn.SiLU(),
                                    nn.Linear(64, (max_l + 1) * features, bias=False))
        self.mix = nn.ModuleList(nn.Linear(features, features, bias=False) for _ in range(max_l + 1))
        n_invariants = _n_invariants(max_l, correlation)
        self.product_weights = nn.Parameter(torch.randn(n_elements, n_invariants, features)
                                            / math.sqrt(n_invariants))
        self.message = nn.Linear(features, features, bias=False)
        self.skip = nn.Linear(features, features, bias=False)

    def forward(self, features: Tensor, species: Tensor, pairs: Tensor, basis: Tensor, envelope: Tensor,
                directions: Tensor) -> Tensor:
        target, source = pairs[:, 0], pairs[:, 1]
        n_atoms = len(features)
        radial = self.radial(basis) * envelope.unsqueeze(-1)
        neighbours = self.neighbour_features(features).index_select(0, source)
        weighted = (radial.view(len(pairs), self.max_l + 1, self.features) * neighbours.unsqueeze(1)
                    / self.neighbours)
        # the channels (last axis) are mixed linearly, the Cartesian axes left alone
        a0 = self.mix[0](scatter_sum(weighted[:, 0], target, n_atoms))
        a1 = self.mix[1](scatter_sum(weighted[:, 1, None, :] * directions[:, :, None], target, n_atoms))
        a2 = None
        if self.max_l == 2:
            eye = torch.eye(3, dtype=directions.dtype, device=directions.device)
            harmonic = directions[:, :, None] * directions[:, None, :] - eye / 3.0
            a2 = self.mix[2](scatter_sum(weighted[:, 2, None, None] * harmonic[..., None], target, n_atoms))
        products = torch.stack(_invariants(a0, a1, a2, self.correlation), dim=1)  # (N, I, F)
        message = (products * self.product_weights[species]).sum(1)
        return self.skip(features) + self.message(message)


class ACENet(LearnedPotential):
    """Equivariant many-body (MACE-style) learned potential (see the module docstring).

    Args:
        cutoff: nm (default 0.5).
        features: channels of the atomic features and of the atomic basis.
        interactions: message-passing layers (2, as MACE).
        n_basis: Bessel radial basis functions.
        max_l: highest degree of the spherical harmonics, 1 or 2.
        correlation: factors in the symmetric products, 1 to 3 (body order ``correlation + 1``).
        neighbours: typical neighbour count the atomic basis is divided by (keeps it of order one).
        elements: atomic numbers the model embeds.
        skin: neighbour-list skin for periodic or large systems, nm.

    Call: ``model(positions (N, 3) nm, atomic_numbers (N,), box=None, batch=None) -> energy``
    (kJ/mol; ``()`` or ``(M,)`` with ``batch``).
    """

    vanishes_beyond_cutoff = True  # the polynomial envelope multiplies every radial function

    def __init__(self, cutoff: float = 0.5, features: int = 64, interactions: int = 2, n_basis: int = 8,
                 max_l: int = 2, correlation: int = 3, neighbours: float = 10.0, elements=DEFAULT_ELEMENTS,
                 skin: float = 0.1):
        super().__init__(cutoff, elements, skin)
        if max_l not in (1, 2):
            raise ConfigurationError(f"ACENet: max_l must be 1 or 2, got {max_l!r}")
        if correlation not in (1, 2, 3):
            raise ConfigurationError(f"ACENet: correlation must be 1, 2 or 3, got {correlation!r}")
        if not (isinstance(neighbours, int | float) and neighbours > 0):
            raise ConfigurationError(f"ACENet: neighbours must be a positive number, got {neighbours!r}")
        self._record_hyperparameters(dict(features=features, interactions=interactions, n_basis=n_basis),
                                     max_l=max_l, correlation=correlation, neighbours=neighbours)
        self.embedding = nn.Embedding(self.n_elements, features)
        self.basis = BesselBasis(n_basis, cutoff)
        self.envelope = PolynomialEnvelope(cutoff)
        self.layers = nn.ModuleList(_Layer(features, n_basis, self.n_elements, max_l, correlation, neighbours)
                                    for _ in range(interactions))
        self.readouts = nn.ModuleList([nn.Linear(features, 1) for _ in range(interactions - 1)]
                                      + [atom_readout(features, nn.SiLU())])

    def atomic_outputs(self, species: Tensor, pairs: Tensor, vectors: Tensor) -> Tensor:
        distances = vectors.norm(dim=-1)
        directions = vectors / distances.unsqueeze(-1)
        basis, envelope = self.basis(distances), self.envelope(distances)
        features = self.embedding(species)
        output = features.new_zeros(len(species))
        for layer, readout in zip(self.layers, self.readouts, strict=True):
            features = layer(features, species, pairs, basis, envelope, directions)
            output = output + readout(features).squeeze(-1)
        return output
