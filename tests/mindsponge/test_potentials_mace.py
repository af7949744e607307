"""ms.potentials.MACE against mace-torch's own ASE calculator (MACECalculator) on the same model and
weights, and in Simulation, SumPotential, the ASE calculator and the Trainer."""

import importlib
import os
import sys

import ase.build
import numpy as np
import pytest
import torch

import mindsponge as ms
from common.errors import ConfigurationError, MindScienceError

pytest.importorskip("mace")
from mindsponge.potentials.mace import EV_IN_KJ_PER_MOL, _import_mace  # noqa: E402


def water_dimer_and_ethanol():
    ethanol = ase.build.molecule("CH3CH2OH")
    water = ase.build.molecule("H2O")
    water.translate([2.6, 0.4, 0.3])  # within the 5 Angstrom cutoff of ethanol
    return ethanol + water


@pytest.fixture
def float64_default():
    """mace-torch's calculator converts positions to torch's default dtype: float64 for the comparison."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    """A float64 MACE (random weights, 2 layers, l <= 2, correlation 3, vector hidden features) and
    its mace-torch module saved as a ``.model`` file."""
    torch.manual_seed(0)
    model = ms.potentials.MACE(features=16, interactions=2, hidden_l=1, dtype="float64")
    path = tmp_path_factory.mktemp("mace") / "random.model"
    torch.save(model.mace_model, path)
    return model, path


@pytest.mark.slow
def test_energies_and_forces_equal_mace_calculator(model_file, float64_default):
    _import_mace()
    from mace.calculators import MACECalculator

    model, path = model_file
    atoms = water_dimer_and_ethanol()
    rng = np.random.default_rng(0)
    atoms.positions += 0.05 * rng.standard_normal(atoms.positions.shape)
    atoms.calc = MACECalculator(model_paths=str(path), device="cpu", default_dtype="float64")
    reference_energy = atoms.get_potential_energy() * EV_IN_KJ_PER_MOL  # kJ/mol
    reference_forces = torch.tensor(atoms.get_forces()) * EV_IN_KJ_PER_MOL * 10.0  # kJ/mol/nm
    positions = torch.tensor(atoms.positions) * 0.1
    # the wrapper on the model file mace-torch's calculator reads: equal to round-off
    loaded = ms.potentials.MACE.from_file(path, trust=True)
    energy, forces = ms.forcefield.energy_and_forces(loaded.bind(atoms.numbers), positions)
    assert abs(float(energy) - reference_energy) < 1e-10 * abs(reference_energy)
    torch.testing.assert_close(forces, reference_forces, atol=1e-10 * float(reference_forces.abs().max()),
                               rtol=0)
    assert float(reference_forces.abs().max()) > 1.0  # not trivially flat
    # the model as built in memory agrees to 1e-7 (relative): a saved and reloaded e3nn module
    # rebuilds some of its constants, which changes the last digits
    energy, forces = ms.forcefield.energy_and_forces(model.bind(atoms.numbers), positions)
    assert abs(float(energy) - reference_energy) < 1e-7 * abs(reference_energy)
    torch.testing.assert_close(forces, reference_forces, atol=1e-7 * float(reference_forces.abs().max()),
                               rtol=0)
    # batched molecules: one energy each
    ethanol = positions[:9]
    energies = model(torch.cat([ethanol, positions[9:]]), torch.tensor(atoms.numbers),
                     batch=torch.tensor([0] * 9 + [1] * 3))
    torch.testing.assert_close(energies, torch.stack([model(ethanol, torch.tensor(atoms.numbers[:9])),
                                                      model(positions[9:], torch.tensor(atoms.numbers[9:]))]))


def test_runs_in_simulation_sum_potential_and_ase_calculator(model_file):
    model, _ = model_file
    system = ms.System.from_ase(ase.build.molecule("CH3CH2OH"))
    bound = model.bind(system.atomic_numbers)
    simulation = ms.Simulation(system, ms.potentials.SumPotential(bound),
                               ms.integrators.LangevinMiddle(dt=0.0002, temperature=300.0, friction=1.0),
                               progress=False, precision="double")
    simulation.set_velocities(temperature=300.0, seed=1)
    simulation.run(5)
    reference = model(simulation.state.positions, system.atomic_numbers)
    assert abs(simulation.observables()["potential"] - float(reference)) < 1e-8


class _CreatesMarker:
    """Unpickling this calls ``open(marker, "w")``: the marker file appears if the pickle is run."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def test_a_model_file_is_refused_without_trust_and_runs_nothing(tmp_path):
    marker = tmp_path / "marker"
    path = tmp_path / "crafted.model"
    torch.save(_CreatesMarker(marker), path)
    with pytest.raises(ConfigurationError, match=r"crafted\.model.*pickle.*trust=True") as refusal:
        ms.potentials.MACE.from_file(path)
    assert isinstance(refusal.value, MindScienceError)
    with pytest.raises(ConfigurationError):
        ms.potentials.MACE.from_file(path, trust="yes")  # only True itself
    assert not marker.exists()
    # the control: trusting the file runs its code (and what it holds is not a mace-torch model)
    with pytest.raises(TypeError, match="mace-torch MACE model"):
        ms.potentials.MACE.from_file(path, trust=True)
    assert marker.exists()


def test_importing_mace_leaves_torch_load_safe_by_default(monkeypatch):
    monkeypatch.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", raising=False)
    monkeypatch.delitem(sys.modules, "mace")
    importlib.import_module("mace")  # the control: mace-torch's import turns torch.load's safe default off
    assert os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD") == "1"
    os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    monkeypatch.delitem(sys.modules, "mace")
    _import_mace()
    assert "mace" in sys.modules and "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in os.environ


def test_a_trusted_model_file_gives_the_saved_model(model_file):
    model, path = model_file
    loaded = ms.potentials.MACE.from_file(path, trust=True)
    positions = torch.tensor(water_dimer_and_ethanol().positions) * 0.1
    numbers = torch.tensor(water_dimer_and_ethanol().numbers)
    assert abs(float(loaded(positions, numbers)) - float(model(positions, numbers))) < 1e-7 * abs(
        float(model(positions, numbers)))


def test_a_committee_of_mace_models_runs_model_by_model():
    from mindsponge.active import Committee

    atoms = ase.build.molecule("CH3CH2OH")
    positions, numbers = torch.tensor(atoms.positions) * 0.1, torch.tensor(atoms.numbers)
    torch.manual_seed(0)
    committee = Committee([ms.potentials.MACE(features=8, max_l=1, correlation=2, dtype="float64")
                           for _ in range(2)])
    bound = committee.bind(numbers)
    assert not bound.vectorised  # mace-torch's forward cannot run under torch.func.vmap
    expected = (committee.models[0](positions, numbers) + committee.models[1](positions, numbers)) / 2
    assert abs(float(bound(positions) - expected)) < 1e-10


def test_mindsponge_ase_calculator_equals_mace_calculator(model_file, float64_default):
    """Both in eV and eV/Angstrom (the unit constants of common.units and ASE agree to 1e-8)."""
    _import_mace()
    from mace.calculators import MACECalculator

    model, path = model_file
    ours, theirs = water_dimer_and_ethanol(), water_dimer_and_ethanol()
    ours.calc = ms.interop.ase.Calculator(ms.potentials.MACE.from_file(path, trust=True))
    theirs.calc = MACECalculator(model_paths=str(path), device="cpu", default_dtype="float64")
    assert abs(ours.get_potential_energy() - theirs.get_potential_energy()) < 1e-8 * abs(
        theirs.get_potential_energy()) + 1e-12
    np.testing.assert_allclose(ours.get_forces(), theirs.get_forces(), rtol=0,
                               atol=1e-8 * np.abs(theirs.get_forces()).max())
