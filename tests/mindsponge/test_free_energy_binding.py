"""A binding free energy through ``mindsponge fe`` end to end, tiny: toluene on benzene in vacuum.

openmmtools' ``benzene-toluene-implicit`` files (GAFF prmtops; the "receptor" is benzene, the ligand
toluene, residue ``TOL``), no cutoff, a few iterations of four states: the restraint is switched on
(``lambda_restraints`` 0 -> 1) at full coupling, then Coulomb and Lennard-Jones are switched off. What
is checked: the run finishes, the restraint is in the complex leg only (the complex's force field has
``lambda_restraints``, the solvent's does not), its standard-state correction is openmmtools' for the
same flat-bottom restraint (``FlatBottomRestraintForce.compute_standard_state_correction``) or, for
Boresch, eq. 32 recomputed from the reported parameters, and the combined value is
``dG_solvent - dG_complex - correction``. Bad keys are refused with the file, line and key.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil

import pytest

pytest.importorskip("openmm")
openmmtools = pytest.importorskip("openmmtools")
pytest.importorskip("pymbar")

from common.config import ConfigError  # noqa: E402
from common.units import BOLTZMANN_MD  # noqa: E402

DATA = os.path.join(os.path.dirname(openmmtools.__file__), "data", "benzene-toluene-implicit")
TEMPERATURE = 300.0

CONFIG = """\
constraints = "none"
precision = "double"
minimize = true

[free_energy]
combine = "binding"
temperature = 300.0
steps_per_iteration = 20
iterations = 4
equilibration = 1
bootstrap = 0

[free_energy.region]
residue = "TOL"

[free_energy.schedule]
lambda_electrostatics = [1.0, 1.0, 0.0, 0.0]
lambda_sterics = [1.0, 1.0, 1.0, 0.0]
lambda_restraints = [0.0, 1.0, 1.0, 1.0]

[free_energy.restraint]
{restraint}

[[free_energy.leg]]
name = "complex"
[free_energy.leg.system]
prmtop = "complex.prmtop"
inpcrd = "complex.inpcrd"

[[free_energy.leg]]
name = "solvent"
[free_energy.leg.schedule]
lambda_electrostatics = [1.0, 0.0, 0.0]
lambda_sterics = [1.0, 1.0, 0.0]
[free_energy.leg.system]
prmtop = "solvent.prmtop"
inpcrd = "solvent.inpcrd"

[output]
directory = "out"
plots = false
"""


def _write(folder, restraint: str):
    for name in ("complex.prmtop", "complex.inpcrd", "solvent.prmtop", "solvent.inpcrd"):
        shutil.copy(os.path.join(DATA, name), folder / name)
    path = folder / "binding.toml"
    path.write_text(CONFIG.format(restraint=restraint))
    return path


@pytest.mark.parametrize("restraint", [
    pytest.param('kind = "flat-bottom"\nwell_radius = 0.6', id="flat-bottom"),
    # about a minute: the six-particle expression is evaluated term by term at every step
    pytest.param('kind = "boresch"', id="boresch", marks=pytest.mark.slow)])
def test_binding_leg_end_to_end(tmp_path, restraint):
    from mindsponge import cli_free_energy

    path = _write(tmp_path, restraint)
    output = cli_free_energy.run(path, progress=False)
    assert json.loads((tmp_path / "out" / "results.json").read_text())["restraint"] == output["restraint"]
    summary = output["restraint"]
    assert summary["leg"] == "complex"
    parameters = summary["parameters"]
    assert set(parameters["ligand_atoms"]) <= set(range(12, 27))  # toluene follows benzene's 12 atoms
    assert set(parameters["receptor_atoms"]) <= set(range(12))
    correction = summary["standard_state_correction"]["kT"]
    if summary["kind"] == "flat-bottom":
        import openmm
        from openmm import unit
        from openmmtools import forces, states

        system = openmm.System()
        for _ in range(27):
            system.addParticle(12.0)
        spring_constant = parameters["spring_constant"] * unit.kilojoule_per_mole / unit.nanometer**2
        force = forces.FlatBottomRestraintForce(spring_constant, parameters["well_radius"] * unit.nanometer,
                                                parameters["receptor_atoms"], parameters["ligand_atoms"])
        system.addForce(force)
        state = states.ThermodynamicState(system, TEMPERATURE * unit.kelvin)
        expected = force.compute_standard_state_correction(state)
        assert parameters["well_radius"] == 0.6
    else:
        kT = BOLTZMANN_MD * TEMPERATURE  # noqa: N806
        keys = ("k_r", "k_theta_a", "k_theta_b", "k_phi_a", "k_phi_b", "k_phi_c")
        stiffness = math.prod(parameters[key] for key in keys)
        expected = -math.log(8 * math.pi**2 * 1.66053907 * math.sqrt(stiffness) / (
            parameters["r0"] ** 2 * math.sin(parameters["theta_a0"]) * math.sin(parameters["theta_b0"])
            * (2 * math.pi * kT) ** 3))
    assert correction == pytest.approx(expected, rel=1e-6)
    legs, combined = output["legs"], output["combined"]
    expected_total = legs["solvent"]["kT"]["mbar"] - legs["complex"]["kT"]["mbar"] - correction
    assert combined["kT"]["value"] == pytest.approx(expected_total, rel=1e-9, abs=1e-9)
    assert combined["correction_kT"] == pytest.approx(-correction)
    print(f"{summary['kind']}: dG_bind {combined['kcal/mol']['value']:.2f} kcal/mol, correction "
          f"{summary['standard_state_correction']['kcal/mol']:.2f} kcal/mol")


def test_restraint_only_in_its_leg(tmp_path):
    from common import config as config_module
    from mindsponge import cli_free_energy
    from mindsponge.cli_free_energy import FreeEnergyRunConfig

    path = _write(tmp_path, 'kind = "harmonic"')
    config = config_module.load(path, FreeEnergyRunConfig)
    import torch

    built = [cli_free_energy._build_leg(config, index, path, torch.float64) for index in range(2)]
    (_, complex_field, complex_states, restraint), (_, solvent_field, _, none) = built
    assert "lambda_restraints" in complex_field.global_parameters
    assert "lambda_restraints" not in solvent_field.global_parameters and none is None
    assert [state["lambda_restraints"] for state in complex_states] == [0.0, 1.0, 1.0, 1.0]
    assert restraint.kind == "harmonic" and len(restraint.receptor_atoms) >= 3


@pytest.mark.parametrize("restraint, key, message", [
    ('kind = "harmonic"\nspring = 3.0', "spring", "spring"),
    ('kind = "boresch"\nreceptor_atoms = [0, 1]', "receptor_atoms", "three atoms"),
    ('kind = "harmonic"\nleg = "bound"', "leg", "not a leg"),
    ('kind = "harmonic"\nligand_atoms = [12, 99]', "ligand_atoms", "outside"),
    ('kind = "harmonic"\nwell_radius = 0.5', "well_radius", "flat-bottom"),
], ids=["unknown-key", "boresch-atoms", "leg", "outside", "well-radius"])
def test_bad_restraint_keys_are_refused(tmp_path, restraint, key, message):
    from mindsponge import cli_free_energy

    path = _write(tmp_path, restraint)
    with pytest.raises(ConfigError, match=message) as caught:
        cli_free_energy.run(path, progress=False)
    text = str(caught.value)
    assert re.search(r"binding\.toml:\d+: ", text) and key in text, text
