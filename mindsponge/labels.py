"""Reference labels (energies and forces) for training learned potentials.

- :class:`XTB`: GFN2-xTB (or GFN1-xTB) through the ``tblite`` package as a potential module
  ``(positions (N, 3) nm, box) -> energy () kJ/mol`` whose gradient is tblite's analytic one
  (converted from Hartree and Bohr with :mod:`common.units`). Being a potential, it runs in a
  :class:`~mindsponge.simulation.Simulation` (GFN2-xTB molecular dynamics) and in :func:`label`.
- :func:`label`: energies and forces of a set of configurations under any potential called as
  ``(positions, box) -> energy``: an :class:`XTB`, a :class:`~mindsponge.forcefield.ForceField`
  (e.g. from :func:`mindsponge.interop.openmm.load`), a bound learned potential.
- :class:`TrajectoryLabels`: a reporter keeping the frames of an MD run under a reference
  potential with the energies and forces the run computed anyway;
- :func:`xtb_sample`: the dataset-generator callable (``fn(params, seed, **options) -> dict``,
  see ``common.datasets``): one configuration of any molecule (a built-in name, an XYZ or PDB
  file, an ``ase.Atoms``, ``"smiles:..."``; see :mod:`mindsponge.molecules`) drawn at
  ``params["temperature"]`` by a short GFN2-xTB Langevin run, along the normal modes of the
  optimised geometry (:mod:`mindsponge.normal_modes`), or by random displacements, with its
  GFN2-xTB energy and forces.

Labelled sets are written and read as extxyz, ASE db, npz or HDF5 by :mod:`mindsponge.label_io`.

Example::

    sample = xtb_sample({"temperature": 600.0}, seed=3, molecule="ethanol")
    sample["positions"].shape, sample["energy"].shape, sample["forces"].shape   # (9, 3), (), (9, 3)
    label("GFN2-xTB", "smiles:CCO")["forces"].shape                              # (9, 3) kJ/mol/nm
"""

from __future__ import annotations

import math
import os
import zlib

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from common import checks, units
from common.errors import ConfigurationError, SimulationError
from mindsponge.molecules import MOLECULES, Molecule, load_molecule, molecule
from mindsponge.molecules import conformers as conformer_ensemble

__all__ = ["XTB", "label", "xtb_sample", "molecule", "MOLECULES", "SAMPLINGS", "TrajectoryLabels"]

_BOHR_PER_NM = 1.0 / units.BOHR_TO_NM
_DISPLACEMENT_STIFFNESS = 1e5  # kJ/mol/nm^2, sets the spread of sampling="displace"


class _XTBEnergy(torch.autograd.Function):
    """Energy (kJ/mol) from tblite with its analytic gradient (first derivatives only)."""

    @staticmethod
    def forward(ctx, positions, box, calculator):
        energy, gradient = calculator._energy_and_gradient(positions.detach(), box)
        ctx.save_for_backward(gradient.to(positions))
        return positions.new_tensor(energy)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_energy):
        (gradient,) = ctx.saved_tensors
        return grad_energy * gradient, None, None


class XTB(nn.Module):
    """GFN-xTB energies through tblite, as a potential ``(positions, box) -> energy``.

    Args:
        atomic_numbers: ``(N,)`` integers.
        method: ``"GFN2-xTB"`` (default) or ``"GFN1-xTB"``.
        charge: total charge, e.
        unpaired_electrons: number of unpaired electrons.
        accuracy: tblite's numerical accuracy (smaller is tighter).

    Forward: positions ``(N, 3)`` nm, box ``(3, 3)`` nm (rows) or ``None`` -> energy ``()`` kJ/mol
    in the dtype of ``positions``; forces by autograd (not twice differentiable). The SCF of one
    call restarts from the previous one's wavefunction.

    Raises:
        ImportError: tblite is not installed (``pip install 'mindscience-torch[xtb]'``).
        RuntimeError: the SCF does not converge (the message gives the positions' shape and method).
    """

    def __init__(self, atomic_numbers, method: str = "GFN2-xTB", charge: float = 0.0,
                 unpaired_electrons: int = 0, accuracy: float = 1.0):
        super().__init__()
        try:
            import tblite.interface  # noqa: F401
        except ImportError as error:
            raise ImportError("XTB needs the tblite package: pip install 'mindscience-torch[xtb]'") from error
        if method not in ("GFN2-xTB", "GFN1-xTB"):
            raise ConfigurationError(f"method must be 'GFN2-xTB' or 'GFN1-xTB', got {method!r}")
        numbers = torch.as_tensor(atomic_numbers)
        if numbers.ndim != 1 or numbers.is_floating_point() or bool((numbers < 1).any()):
            raise ConfigurationError(
                f"atomic_numbers must be an (N,) tensor of integers >= 1, got {numbers!r}")
        self.register_buffer("atomic_numbers", numbers.long(), persistent=False)
        self.method, self.charge, self.accuracy = method, charge, accuracy
        self.unpaired_electrons = unpaired_electrons
        self._calculator = None
        self._periodic = None
        self._result = None

    def _energy_and_gradient(self, positions: Tensor, box: Tensor | None) -> tuple[float, Tensor]:
        from tblite.interface import Calculator

        if positions.shape != (len(self.atomic_numbers), 3):
            raise ConfigurationError(
                f"XTB: positions must be ({len(self.atomic_numbers)}, 3) nm for its atoms, got "
                f"{tuple(positions.shape)}"
            )
        bohr = positions.detach().cpu().double().numpy() * _BOHR_PER_NM
        lattice = None if box is None else box.detach().cpu().double().numpy() * _BOHR_PER_NM
        if self._calculator is None or self._periodic != (box is not None):
            self._calculator = Calculator(
                self.method, self.atomic_numbers.cpu().numpy(), bohr, charge=self.charge,
                uhf=self.unpaired_electrons, lattice=lattice,
                periodic=None if box is None else np.array([True, True, True]))
            self._calculator.set("verbosity", 0)
            self._calculator.set("accuracy", self.accuracy)
            self._periodic, self._result = box is not None, None
        else:
            self._calculator.update(positions=bohr, lattice=lattice)
        try:
            self._result = self._calculator.singlepoint(self._result)
        except RuntimeError as error:
            self._result = None
            raise SimulationError(f"XTB ({self.method}, {len(bohr)} atoms): {error}") from error
        energy = float(self._result.get("energy")) * units.HARTREE_TO_KJ_PER_MOL
        gradient = torch.from_numpy(self._result.get("gradient") * units.HARTREE_PER_BOHR_TO_KJ_PER_MOL_NM)
        return energy, gradient.to(positions.device)

    def forward(self, positions: Tensor, box: Tensor | None = None) -> Tensor:
        """Energy ``()`` kJ/mol of positions ``(N, 3)`` nm in ``box`` ``(3, 3)`` nm or ``None``."""
        return _XTBEnergy.apply(positions, box, self)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_calculator"], state["_result"], state["_periodic"] = None, None, None
        return state

    def extra_repr(self) -> str:
        return f"method={self.method!r}, atoms={len(self.atomic_numbers)}, charge={self.charge}"


def _structure_and_potential(potential, structure) -> tuple[nn.Module, Tensor, Molecule]:
    """The positions (nm) of a structure source and the potential (an :class:`XTB` for a method name)."""
    source = load_molecule(structure)
    if isinstance(potential, str):
        potential = XTB(torch.as_tensor(source.atomic_numbers), method=potential, charge=source.charge)
    return potential, torch.as_tensor(source.positions), source


def _is_structure(positions) -> bool:
    return isinstance(positions, str | Molecule | os.PathLike) or hasattr(positions, "get_positions") \
        or hasattr(positions, "atomic_numbers")


def label(potential, positions, box=None, progress: bool = False) -> dict[str, np.ndarray]:
    """Energies and forces of configurations under a potential.

    Args:
        potential: called as ``potential(positions (N, 3) nm, box) -> energy () kJ/mol``: an
            :class:`XTB`, a :class:`~mindsponge.forcefield.ForceField`, ``model.bind(numbers)``...;
            or a method name (``"GFN2-xTB"``, ``"GFN1-xTB"``) when ``positions`` is a structure.
        positions: ``(S, N, 3)`` (or ``(N, 3)``) array or tensor, nm; or one structure as
            :func:`mindsponge.molecules.load_molecule` reads it (an XYZ/PDB file, an
            ``ase.Atoms``, ``"smiles:CCO"``, a built-in name).
        box: ``(3, 3)`` nm (all configurations), ``(S, 3, 3)``, or ``None``.
        progress: show a progress bar.

    Returns:
        ``{"energy": (S,) kJ/mol, "forces": (S, N, 3) kJ/mol/nm}`` float64 arrays (``()`` and
        ``(N, 3)`` for one configuration); for a structure also ``positions`` ``(N, 3)`` nm and
        ``atomic_numbers`` ``(N,)`` int64.
    """
    from mindsponge.forcefield.base import energy_and_forces

    source = None
    if _is_structure(positions):
        potential, positions, source = _structure_and_potential(potential, positions)
    elif isinstance(potential, str):
        raise ConfigurationError(
            f"label: a method name ({potential!r}) needs a structure (a file, ase.Atoms, "
                         "'smiles:...'), not bare positions; pass XTB(atomic_numbers) instead")
    positions = torch.as_tensor(positions)
    single = positions.ndim == 2
    batch = positions.unsqueeze(0) if single else positions
    if batch.ndim != 3 or batch.shape[-1] != 3:
        raise ConfigurationError(f"positions must be (S, N, 3) or (N, 3) nm, got {tuple(positions.shape)}")
    boxes = None if box is None else torch.as_tensor(box).to(batch)
    if boxes is not None and boxes.ndim == 2:
        boxes = boxes.expand(len(batch), 3, 3)
    if boxes is not None and boxes.shape != (len(batch), 3, 3):
        raise ConfigurationError(f"box must be (3, 3) or ({len(batch)}, 3, 3) nm, got {tuple(boxes.shape)}")
    energies, forces = [], []
    for index in tqdm(range(len(batch)), desc="labels", disable=not progress):
        energy, force = energy_and_forces(potential, batch[index], None if boxes is None else boxes[index])
        energies.append(float(energy))
        forces.append(force.detach().cpu().double().numpy())
    result = {"energy": np.asarray(energies), "forces": np.stack(forces)}
    result = {key: value[0] for key, value in result.items()} if single else result
    if source is not None:
        result.update(positions=source.positions, atomic_numbers=source.atomic_numbers)
    return result


class TrajectoryLabels:
    """A reporter that keeps configurations of a simulation with the energies and forces already computed.

    Every MD step evaluates the potential, so a run under a reference potential (an :class:`XTB`,
    a force field) labels its own frames at no extra cost::

        recorder = TrajectoryLabels(every=5)
        sim = ms.Simulation(system, XTB(system.atomic_numbers), integrator, reporters=[recorder])
        sim.run(1000)
        recorder.labels()   # positions (F, N, 3) nm, energy (F,) kJ/mol, forces (F, N, 3) kJ/mol/nm

    A run under the reference plus a bias (an umbrella restraint, a wall: terms added to drive the
    sampling) labels its frames with the reference alone when the recorder is given that bias:
    its energy and forces are subtracted from the recorded ones.

    Args:
        every: record every this many steps.
        bias: a ``(positions, box) -> energy`` module (kJ/mol) that is part of the simulated
            potential but not of the labels, or ``None``; it can be set later (``recorder.bias``).
    """

    def __init__(self, every: int = 1, bias=None):
        checks.positive_int(every, "TrajectoryLabels: every (steps)")
        self.every, self.bias = every, bias
        self._frames: list[tuple[np.ndarray, float, np.ndarray]] = []

    def report(self, state, observables) -> None:
        """Record the positions, potential energy and forces of ``state`` (less those of the bias)."""
        energy, forces = float(state.potential_energy), state.forces.detach().cpu().double()
        if self.bias is not None:
            with torch.enable_grad():
                positions = state.positions.detach().clone().requires_grad_(True)
                bias_energy = self.bias(positions, state.box)
                (gradient,) = torch.autograd.grad(bias_energy, positions)
            energy -= float(bias_energy.detach())
            forces = forces + gradient.detach().cpu().double()
        self._frames.append((state.positions.detach().cpu().double().numpy(), energy, forces.numpy()))

    def __len__(self) -> int:
        return len(self._frames)

    def labels(self) -> dict[str, np.ndarray]:
        """``positions`` (F, N, 3) nm, ``energy`` (F,) kJ/mol, ``forces`` (F, N, 3) kJ/mol/nm (float64)."""
        if not self._frames:
            raise ConfigurationError("TrajectoryLabels has recorded no frames yet (run the simulation first)")
        positions, energies, forces = zip(*self._frames, strict=True)
        return {"positions": np.stack(positions), "energy": np.asarray(energies), "forces": np.stack(forces)}

    def close(self) -> None:
        """Nothing to release (the frames stay available)."""


SAMPLINGS = ("md", "trajectory", "displace", "normal_modes")
_TRAJECTORIES: dict[tuple, tuple[int, object]] = {}  # per process: trajectory key -> (frame, Simulation)
_KEPT_TRAJECTORIES = 4
_NORMAL_MODES_CACHE: dict[tuple, object] = {}  # per process: (structure, method, charge) -> NormalModes
_CONFORMERS_CACHE: dict[tuple, list] = {}  # per process: (molecule, count, charge) -> conformers


def _conformers(molecule, count: int, charge: float | None) -> list[Molecule]:
    """The conformer ensemble of ``molecule`` (cached per process for names, files and SMILES)."""
    if not isinstance(molecule, str | os.PathLike):
        return conformer_ensemble(molecule, count, charge)
    key = (str(molecule), count, charge)
    if key not in _CONFORMERS_CACHE:
        _CONFORMERS_CACHE[key] = conformer_ensemble(molecule, count, charge)
    return _CONFORMERS_CACHE[key]


def _temperature(params) -> float:
    temperature = params.get("temperature") if isinstance(params, dict) else None
    if not isinstance(temperature, int | float) or not math.isfinite(temperature) or temperature <= 0:
        raise ConfigurationError(
            f"xtb_sample: params['temperature'] must be a positive number of K, got {params!r}")
    return float(temperature)


def _md_positions(system, potential, temperature, seed, md_steps, timestep, friction) -> Tensor:
    """Positions after a Langevin run started at twice ``temperature`` (half goes into the potential)."""
    from mindsponge.integrators import LangevinMiddle
    from mindsponge.simulation import Simulation

    simulation = Simulation(system, potential, LangevinMiddle(timestep, temperature, friction),
                            seed=seed, progress=False, remove_center_of_mass_motion=False)
    simulation.set_velocities(2.0 * temperature, seed=seed)
    simulation.run(md_steps)
    return simulation.state.positions


def _frame(params) -> int:
    frame = params.get("frame")
    if isinstance(frame, float) and frame.is_integer():
        frame = int(frame)
    if not isinstance(frame, int) or isinstance(frame, bool) or frame < 0:
        raise ConfigurationError(
            "xtb_sample: sampling=\"trajectory\" gives one frame of a trajectory: params['frame'] must be a "
            "non-negative integer (a grid parameter such as frame = { values = [0, 1, ...] }), got "
            f"{params!r}")
    return frame


def _trajectory_positions(system, potential, key, temperature, frame, stride, equilibration, timestep,
                          friction) -> Tensor:
    """Positions of frame ``frame`` of the Langevin trajectory ``key``: ``equilibration + frame * stride``
    steps from the conformer with velocities at ``temperature``. The trajectory is continued where this
    process left it when it can (runs continue bit for bit), else run from its start."""
    from mindsponge.integrators import LangevinMiddle
    from mindsponge.simulation import Simulation

    done, simulation = _TRAJECTORIES.pop(key, (None, None))
    if simulation is None or done > frame:
        seed = zlib.crc32(repr(key).encode())  # the trajectory's own, whatever the sample's seed
        simulation = Simulation(system, potential, LangevinMiddle(timestep, temperature, friction), seed=seed,
                                progress=False, remove_center_of_mass_motion=False)
        simulation.set_velocities(temperature, seed=seed)
        simulation.run(equilibration)
        done = 0
    simulation.run((frame - done) * stride)
    _TRAJECTORIES[key] = (frame, simulation)
    while len(_TRAJECTORIES) > _KEPT_TRAJECTORIES:
        _TRAJECTORIES.pop(next(iter(_TRAJECTORIES)))
    return simulation.state.positions


def _displaced_positions(system, temperature, seed) -> Tensor:
    """Gaussian displacements of every coordinate with the thermal spread of a generic stiffness."""
    generator = torch.Generator().manual_seed(seed)
    spread = math.sqrt(units.BOLTZMANN_MD * temperature / _DISPLACEMENT_STIFFNESS)
    return system.positions + spread * torch.randn(system.positions.shape, generator=generator,
                                                   dtype=system.positions.dtype)


def _normal_mode_positions(system, potential, structure: Molecule, temperature, seed) -> Tensor:
    """A classical harmonic sample along the normal modes at the optimised geometry (cached per process)."""
    from mindsponge import normal_modes

    key = (structure.atomic_numbers.tobytes(), structure.positions.tobytes(), potential.method,
           potential.charge)
    modes = _NORMAL_MODES_CACHE.get(key)
    if modes is None:
        masses = system.masses.cpu().numpy()
        minimum = normal_modes.optimize(potential, structure.positions, masses)
        modes = _NORMAL_MODES_CACHE[key] = normal_modes.normal_modes(potential, minimum, masses)
    return torch.as_tensor(modes.sample(temperature, np.random.default_rng(seed)))


def xtb_sample(params: dict, seed: int, molecule="ethanol", sampling: str = "md", md_steps: int = 20,
               timestep: float = 0.0005, friction: float = 20.0, method: str = "GFN2-xTB",
               charge: float | None = None, conformers: int = 10, stride: int = 200,
               equilibration: int = 1000) -> dict[str, np.ndarray]:
    """One configuration of a molecule with its GFN-xTB energy and forces (a dataset generator).

    Sample ``seed`` starts from conformer ``seed % C`` of the molecule's ensemble
    (:func:`mindsponge.molecules.conformers`: RDKit's ETKDG conformers of a SMILES, the frames of a
    multi-frame file, else the one structure), so that a dataset covers every rotamer rather than
    the basin of one geometry. The configuration is drawn at ``params["temperature"]`` (K):

    - ``sampling="trajectory"`` (decorrelated frames of long runs, what a dataset for MD needs): frame
      ``params["frame"]`` of a GFN-xTB Langevin trajectory at the temperature, started from conformer
      ``params["conformer"] % C`` (default 0; indices past ``C`` start again from the first conformers,
      each with its own random stream) with velocities at the temperature: ``equilibration``
      steps, then a frame every ``stride`` steps (100 fs apart by default). A recipe crosses
      ``temperature``, ``conformer`` and ``frame`` on a grid, frame last, so that a worker continues
      each trajectory instead of running it again (a process keeps its last few). A trajectory's random
      stream comes from its temperature and conformer, so a frame is the same whichever sample, worker
      or resumed run computes it;
    - ``sampling="md"``: a Langevin run of ``md_steps`` steps under GFN2-xTB from the given
      geometry with Maxwell-Boltzmann velocities at twice the temperature (half the kinetic
      energy goes into the potential): many short independent runs, each near its start;
    - ``sampling="normal_modes"``: the geometry is optimised under the xTB method, its Hessian
      taken by finite differences of tblite's analytic gradients, and the configuration drawn
      from the classical harmonic distribution at the temperature along the ``3N - 6``
      (``3N - 5``) vibrations (:mod:`mindsponge.normal_modes`; computed once per process);
    - ``sampling="displace"``: Gaussian displacements of every coordinate with a standard
      deviation ``sqrt(k_B T / k)``, the thermal amplitude of a generic stiffness
      ``k = 1e5 kJ/mol/nm^2`` (bond stretches are 2e5-4e5, bends and torsions softer).

    Args:
        params: ``{"temperature": K}``; with ``sampling="trajectory"`` also ``"frame"`` (and optionally
            ``"conformer"``); other keys are ignored.
        seed: random seed of this sample.
        molecule: anything :func:`mindsponge.molecules.load_molecule` reads: a built-in name
            (default ethanol), an XYZ or PDB file, ``"smiles:CCO"``, an ``ase.Atoms``.
        sampling: ``"trajectory"``, ``"md"``, ``"normal_modes"`` or ``"displace"``.
        md_steps: Langevin steps (``sampling="md"``).
        timestep: ps.
        friction: Langevin friction, 1/ps.
        method: ``"GFN2-xTB"`` or ``"GFN1-xTB"``.
        charge: total charge, e (default: from the structure, see ``load_molecule``).
        conformers: the most conformers to start from (1: the one structure ``load_molecule`` gives).
        stride: steps between a trajectory's frames (``sampling="trajectory"``).
        equilibration: steps of a trajectory before its first frame (``sampling="trajectory"``).

    Returns:
        ``positions`` (N, 3) nm, ``atomic_numbers`` (N,) int64, ``energy`` () kJ/mol,
        ``forces`` (N, 3) kJ/mol/nm, ``temperature`` () K: the same keys for every sample.

    Raises:
        ValueError: a missing or non-positive temperature, an unknown molecule or sampling;
            :class:`~common.errors.DataError` for a bad structure file (naming file, line, atom).
    """
    from mindsponge.system import System

    temperature = _temperature(params)
    if sampling not in SAMPLINGS:
        raise ConfigurationError(f"xtb_sample: sampling must be one of {SAMPLINGS}, got {sampling!r}")
    ensemble = _conformers(molecule, conformers, charge)
    if sampling == "trajectory":
        frame = _frame(params)
        checks.positive_int(stride, "xtb_sample: stride (steps)")
        checks.non_negative_int(equilibration, "xtb_sample: equilibration (steps)")
        start = int(params.get("conformer", 0))  # modulo the conformers found; the index names the trajectory
        structure = ensemble[start % len(ensemble)]
    else:
        structure = ensemble[int(seed) % len(ensemble)]
    # the topology (elements, masses) from ASE, the positions exactly as loaded (nm)
    system = System.from_ase(structure.to_ase()).replace(positions=torch.as_tensor(structure.positions))
    potential = XTB(system.atomic_numbers, method=method, charge=structure.charge)
    seed = int(seed)
    if sampling == "trajectory":
        key = (str(molecule), method, structure.charge, len(ensemble), start, temperature, stride,
               equilibration, timestep, friction)
        positions = _trajectory_positions(system, potential, key, temperature, frame, stride, equilibration,
                                          timestep, friction)
    elif sampling == "md":
        positions = _md_positions(system, potential, temperature, seed, md_steps, timestep, friction)
    elif sampling == "normal_modes":
        positions = _normal_mode_positions(system, potential, structure, temperature, seed)
    else:
        positions = _displaced_positions(system, temperature, seed)
    labels = label(potential, positions)
    return {"positions": positions.detach().cpu().numpy(),
            "atomic_numbers": structure.atomic_numbers.astype(np.int64),
            "energy": np.asarray(labels["energy"]), "forces": labels["forces"],
            "temperature": np.asarray(temperature)}
