"""Regenerate ``charmm36_peptide.pdb`` and ``charmm36_peptide_system.xml.gz`` (run from anywhere).

The last three residues of villin (GLY-LEU-PHE, from OpenMM's ``test.pdb``; free N-terminus,
carboxylate C-terminus) with hydrogens added by CHARMM36, in a 2.4 nm cubic box of CHARMM
TIP3P water with 0.3 M NaCl, parameterised by OpenMM's ``charmm36.xml`` + ``charmm36/water.xml``
(PME, 1.0 nm cutoff, switching from 0.9 nm, flexible bonds and water). The NBFIX pair tables of
the ``LennardJones`` CustomNonbondedForce are active for SOD-CLA and SOD-carboxylate oxygens.
Building this takes about a minute (CHARMM36's residue-template matching), so the tests read
the stored files instead.
"""

import gzip
import os

import openmm
from openmm import app, unit

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    pdb = app.PDBFile(os.path.join(os.path.dirname(app.__file__), "data", "test.pdb"))
    modeller = app.Modeller(pdb.topology, pdb.positions)
    residues = list(modeller.topology.residues())
    keep = set(residues[32:35])  # GLY 74, LEU 75, PHE 76
    modeller.delete([residue for residue in residues if residue not in keep])
    modeller.delete([atom for atom in modeller.topology.atoms() if atom.element.symbol == "H"])
    forcefield = app.ForceField("charmm36.xml", "charmm36/water.xml")
    modeller.addHydrogens(forcefield)
    modeller.addSolvent(
        forcefield, boxSize=openmm.Vec3(2.4, 2.4, 2.4) * unit.nanometer, ionicStrength=0.3 * unit.molar
    )
    system = forcefield.createSystem(
        modeller.topology,
        nonbondedMethod=app.PME,
        nonbondedCutoff=1.0 * unit.nanometer,
        switchDistance=0.9 * unit.nanometer,
        constraints=None,
        rigidWater=False,
    )
    with open(os.path.join(HERE, "charmm36_peptide.pdb"), "w") as handle:
        app.PDBFile.writeFile(modeller.topology, modeller.positions, handle)
    with gzip.open(os.path.join(HERE, "charmm36_peptide_system.xml.gz"), "wt") as handle:
        handle.write(openmm.XmlSerializer.serialize(system))


if __name__ == "__main__":
    main()
