"""The fast paths of learned potentials give the plain paths' energies and forces (float64).

- the fixed all-pairs graph of a small molecule (networks whose pair terms vanish beyond the
  cutoff) against the filtered pairs of the batched path (``batch=``), on a molecule with pairs
  beyond the cutoff;
- a bound committee evaluated as one vmapped model against its models one by one (each by
  autograd), after in-place changes of a model's weights too, and a mixed committee (no
  vectorisation) against the same.
"""

import ase.build
import pytest
import torch
from learned_networks import CUTOFF, energy_and_forces, model

from mindsponge.active import Committee
from mindsponge.potentials import ACENet, MolCT, PaiNN, SchNet


def butane():
    """n-butane (ase's G2 geometry): positions (14, 3) nm float64 and atomic numbers (14,)."""
    atoms = ase.build.molecule("trans-butane")
    return torch.tensor(atoms.positions, dtype=torch.float64) * 0.1, torch.tensor(atoms.numbers)


@pytest.mark.parametrize("cls", [SchNet, PaiNN, ACENet])
def test_all_pairs_graph_gives_the_filtered_pairs_energy_and_forces(cls):
    network = model(cls)
    positions, numbers = butane()
    pairs, vectors = network.graph(positions)
    n = len(numbers)
    assert len(pairs) == n * (n - 1)  # every directed pair, fixed
    assert bool((vectors.norm(dim=-1) > CUTOFF).any()), "the test needs pairs beyond the cutoff"
    fast = energy_and_forces(network.bind(numbers), positions)
    batch = torch.zeros(n, dtype=torch.long)  # the batched path filters the pairs by the cutoff
    plain = energy_and_forces(lambda x: network(x, numbers, batch=batch)[0], positions)
    torch.testing.assert_close(fast[0], plain[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fast[1], plain[1], rtol=1e-10, atol=1e-12)
    assert float(fast[1].abs().max()) > 1e-3  # forces that could differ


def test_a_network_without_a_vanishing_envelope_keeps_the_cutoff_filter():
    network = model(MolCT, heads=4)  # attention normalised over neighbours: pairs beyond the cutoff matter
    positions, _ = butane()
    _, vectors = network.graph(positions)
    assert bool((vectors.norm(dim=-1) < CUTOFF).all())


def test_bound_potential_names_wrong_positions():
    positions, numbers = butane()
    with pytest.raises(ValueError, match=r"\(14, 3\) nm for the bound atoms, got \(13, 3\)"):
        model(SchNet).bind(numbers)(positions[:13])


def committee_mean_by_model(committee, positions, numbers):
    """Energy and forces of the committee mean from every model on its own, by autograd."""
    results = [energy_and_forces(lambda x, m=member: m(x, numbers), positions) for member in committee.models]
    return sum(r[0] for r in results) / len(results), sum(r[1] for r in results) / len(results)


@pytest.mark.parametrize("max_pairs", [10**6, 0], ids=["vmap", "loop on the shared graph"])
@pytest.mark.parametrize("cls", [PaiNN, ACENet])
def test_vectorised_committee_equals_the_models_one_by_one(cls, max_pairs, monkeypatch):
    """By vmap over stacked weights, and (graphs above ``vectorise_max_pairs``) model by model on the
    shared graph: the mean of the models' own energies and forces."""
    monkeypatch.setattr(cls, "vectorise_max_pairs", max_pairs)
    positions, numbers = butane()
    committee = Committee([model(cls, seed) for seed in range(3)])
    bound = committee.bind(numbers)
    assert bound.vectorised
    expected = committee_mean_by_model(committee, positions, numbers)
    result = energy_and_forces(bound, positions)
    torch.testing.assert_close(result[0], expected[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(result[1], expected[1], rtol=1e-10, atol=1e-12)
    with torch.no_grad():  # weights changed in place (as an optimiser does): the stacked copies follow
        committee.models[1].embedding.weight.mul_(1.5)
    changed = committee_mean_by_model(committee, positions, numbers)
    assert abs(float(changed[0] - expected[0])) > 1e-6
    torch.testing.assert_close(energy_and_forces(bound, positions)[1], changed[1], rtol=1e-10, atol=1e-12)


def test_mixed_committee_runs_model_by_model():
    positions, numbers = butane()
    committee = Committee([model(SchNet), model(PaiNN)])
    bound = committee.bind(numbers)
    assert not bound.vectorised
    expected = committee_mean_by_model(committee, positions, numbers)
    torch.testing.assert_close(energy_and_forces(bound, positions)[1], expected[1], rtol=1e-12, atol=1e-12)
