"""A hydration free energy from files: toluene (GAFF, openmmtools' ``benzene-toluene-implicit`` data) in
vacuum and in a box of 216 TIP3P waters (openmmtools' ``waterbox``), through ``mindsponge fe``.

:func:`prepare` writes the Amber files of both legs (the solvated one made with ParmEd: the toluene
placed at the centre of the water box and the waters within 0.25 nm of it removed) and a ``mindsponge
fe`` configuration; :func:`mindsponge.cli_free_energy.run` runs it. The ``small`` size only shows the
workflow end to end (a few iterations, far from converged); ``full`` is a modest but real estimate
(experiment: -0.9 kcal/mol; GAFF/TIP3P gives about -0.5 to -1 kcal/mol).

Run ``python -m mindsponge.examples.hydration FOLDER --size small``.
"""

from __future__ import annotations

import argparse
import pathlib

import numpy as np

__all__ = ["prepare", "SIZES"]

#: settings of each size: (steps_per_iteration, iterations, equilibration, electrostatics, sterics)
SIZES = {"small": (20, 6, 1, 2, 3), "full": (500, 300, 30, 5, 9)}
MOLECULE = ("benzene-toluene-implicit", "solvent")  # toluene alone, residue TOL
BOX_EDGE = 1.8774349  # nm, watbox216

CONFIG = """\
constraints = "water+hbonds"
precision = "mixed"
seed = 0

[integrator]
dt = 0.002
friction = 1.0

[free_energy]
combine = "hydration"
temperature = 298.15
steps_per_iteration = {steps}
iterations = {iterations}
equilibration = {equilibration}
hrex = true
bootstrap = {bootstrap}
npt_steps = {npt_steps}

[free_energy.region]
residue = "TOL"

[free_energy.schedule]
electrostatics = {electrostatics}
sterics = {sterics}

[[free_energy.leg]]
name = "solvent"
pressure = 1.0
[free_energy.leg.system]
prmtop = "solvent.prmtop"
inpcrd = "solvent.inpcrd"
[free_energy.leg.forcefield]
nonbonded_method = "PME"
cutoff = 0.8

[[free_energy.leg]]
name = "vacuum"
[free_energy.leg.system]
prmtop = "vacuum.prmtop"
inpcrd = "vacuum.inpcrd"

[output]
directory = "results"
"""


def _data(*parts) -> pathlib.Path:
    import openmmtools

    return pathlib.Path(openmmtools.__file__).parent / "data" / pathlib.Path(*parts)


def prepare(folder, size: str = "small") -> pathlib.Path:
    """Write ``vacuum.prmtop/inpcrd``, ``solvent.prmtop/inpcrd`` and ``hydration.toml`` into ``folder``.

    Returns:
        the configuration's path (run it with :func:`mindsponge.cli_free_energy.run`).
    """
    import parmed

    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    directory, name = MOLECULE
    molecule = parmed.load_file(str(_data(directory, f"{name}.prmtop")),
                                str(_data(directory, f"{name}.inpcrd")))
    molecule.save(str(folder / "vacuum.prmtop"), overwrite=True)
    molecule.save(str(folder / "vacuum.inpcrd"), overwrite=True)
    water = parmed.load_file(str(_data("waterbox", "watbox216.prmtop")),
                             str(_data("waterbox", "watbox216.crd")))
    edge = BOX_EDGE * 10.0  # Angstrom
    solute = molecule.coordinates - molecule.coordinates.mean(axis=0) + edge / 2
    molecule.coordinates = solute
    waters = water.coordinates
    keep = []
    for residue in water.residues:
        atoms = [atom.idx for atom in residue.atoms]
        distances = np.linalg.norm(waters[atoms][:, None, :] - solute[None, :, :], axis=-1)
        if distances.min() > 2.5:
            keep.append(residue.idx)
    removed = [index for index in range(len(water.residues)) if index not in keep]
    if removed:
        water.strip(":" + ",".join(str(index + 1) for index in removed))
    solvated = molecule + water
    solvated.box = [edge, edge, edge, 90.0, 90.0, 90.0]
    solvated.save(str(folder / "solvent.prmtop"), overwrite=True)
    solvated.save(str(folder / "solvent.inpcrd"), overwrite=True)
    steps, iterations, equilibration, electrostatics, sterics = SIZES[size]
    path = folder / "hydration.toml"
    path.write_text(CONFIG.format(steps=steps, iterations=iterations, equilibration=equilibration,
                                  electrostatics=electrostatics, sterics=sterics,
                                  bootstrap=0 if size == "small" else 200,
                                  npt_steps=20 if size == "small" else 20_000))
    return path


def main(argv=None) -> None:  # pragma: no cover - a command-line wrapper
    from mindsponge import cli_free_energy

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=pathlib.Path)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    arguments = parser.parse_args(argv)
    result = cli_free_energy.run(prepare(arguments.folder, arguments.size))
    combined = result["combined"]["kcal/mol"]
    print(f"hydration free energy: {combined['value']:.2f} +- {combined['error']:.2f} kcal/mol")


if __name__ == "__main__":  # pragma: no cover
    main()
