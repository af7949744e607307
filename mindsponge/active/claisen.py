"""The Claisen rearrangement of allyl vinyl ether to pent-4-enal, along d(C-O breaking) - d(C-C forming).

Allyl vinyl ether, ``C=COCC=C`` embedded by RDKit (:mod:`mindsponge.molecules`), numbers its heavy
atoms C0=C1-O2-C3-C4=C5: the O2-C3 bond breaks and the C0-C5 bond forms. The reaction coordinate
is ``s = d(O2, C3) - d(C0, C5)`` (nm): about -0.2 to -0.45 in the reactant (the C0...C5 distance
depends on the conformer), near 0 at the chair transition state, about +0.15 in the product.

- :func:`reaction_coordinate`: the CV (a :class:`~mindsponge.colvar.LinearCombination`);
- :func:`pulled_sample`: a dataset generator (``common.datasets``): a GFN2-xTB Langevin run that
  pulls an umbrella restraint from the reactant to ``params["center"]`` and holds it there, then
  the last frame with its (unbiased) GFN2-xTB energy and forces;
- :func:`umbrella_profile`: umbrella sampling with any potential, the windows run one after the
  other from reactant to product (each starts where the previous ended, or from the configuration
  a restraint pulled through the centres reached at its centre), MBAR profile (pymbar); with
  ``replicas=True`` (learned potentials) all windows run at once as copies of the molecule
  (:mod:`mindsponge.replicas`), one network call per step for all of them;
- :func:`barrier_and_reaction`: barrier and reaction free energy of a profile;
- :func:`ring_conformation`: chair or boat, the ring a frame near the transition state forms
  (profiles through different ones have different barriers);
- :func:`draw_molecule`: a 2D drawing of a configuration (matplotlib).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import torch

from common import checks
from common.errors import ArgumentTypeError, ConfigurationError
from mindsponge import bias as bias_module
from mindsponge.active.exploration import distance_combination
from mindsponge.colvar import Distance, Torsion

__all__ = [
    "SMILES",
    "BREAKING",
    "FORMING",
    "reaction_coordinate",
    "reactant",
    "solvated_reactant",
    "pulled_sample",
    "umbrella_profile",
    "barrier_and_reaction",
    "ring_conformation",
    "draw_molecule",
    "SIZES",
]

SMILES = "smiles:C=COCC=C"
BREAKING = (2, 3)  # O2-C3
FORMING = (0, 5)  # C0...C5
_TIMESTEP, _FRICTION = 0.0005, 5.0  # ps, 1/ps


def reaction_coordinate():
    """``s = d(O2, C3) - d(C0, C5)`` in nm."""
    return distance_combination([BREAKING, FORMING], [1.0, -1.0])


def reactant():
    """The reactant as a :class:`~mindsponge.system.System` (RDKit geometry, positions as embedded)."""
    from mindsponge.molecules import load_molecule
    from mindsponge.system import System

    structure = load_molecule(SMILES)
    return System.from_ase(structure.to_ase()).replace(positions=torch.as_tensor(structure.positions))


def solvated_reactant(waters: int = 30, seed: int = 0, clearance: float = 0.25):
    """The reactant in a droplet of ``waters`` water molecules, not periodic.

    The waters are those nearest to the molecule's centre in a box of rigid TIP3P water at 0.997 g/cm^3
    (:func:`mindsponge.build.water_box`, ``seed``) centred on the molecule, leaving out any with an atom
    closer than ``clearance`` nm to the molecule's atoms. The molecule's atoms come first.
    """
    import ase

    from mindsponge.build import water_box
    from mindsponge.system import System

    checks.positive_int(waters, "solvated_reactant: waters")
    checks.non_negative_int(seed, "solvated_reactant: seed")
    checks.positive(clearance, "solvated_reactant: clearance (nm)")
    molecule = reactant()
    box = water_box(n_molecules=max(8 * waters, 216), seed=seed)
    edge = float(box.box[0, 0])
    solvent = box.positions.numpy().reshape(-1, 3, 3)  # (M, O H H, xyz) nm
    centre = molecule.positions.numpy().mean(0)
    solvent = solvent - edge / 2 + centre
    gaps = np.linalg.norm(solvent[:, :, None] - molecule.positions.numpy()[None, None], axis=-1).min((1, 2))
    oxygen_distance = np.linalg.norm(solvent[:, 0] - centre, axis=-1)
    kept = [index for index in np.argsort(oxygen_distance) if gaps[index] > clearance][:waters]
    if len(kept) < waters:
        raise ConfigurationError(f"solvated_reactant: only {len(kept)} waters fit, {waters} asked for")
    numbers = np.concatenate([molecule.atomic_numbers.numpy(), np.tile([8, 1, 1], len(kept))])
    positions = np.concatenate([molecule.positions.numpy(), solvent[kept].reshape(-1, 3)])
    return System.from_ase(ase.Atoms(numbers=numbers, positions=10.0 * positions))


def _simulation(system, potential, temperature, seed, reporters=()):
    from mindsponge.integrators import LangevinMiddle
    from mindsponge.simulation import Simulation

    return Simulation(
        system,
        potential,
        LangevinMiddle(_TIMESTEP, temperature, _FRICTION),
        reporters=list(reporters),
        seed=seed,
        progress=False,
        overlap_distance=None,
    )


def _restrained(system, potential, force_constant, temperature, seed):
    """A Langevin simulation of ``potential`` plus a harmonic restraint on the reaction coordinate
    (centred at the system's value), velocities drawn; returns it and the restraint."""
    from mindsponge.potentials import SumPotential

    colvar = reaction_coordinate()
    restraint = bias_module.HarmonicRestraint(colvar, float(colvar(system.positions, None)), force_constant)
    simulation = _simulation(system, SumPotential(potential, restraint), temperature, seed)
    simulation.set_velocities(temperature, seed=seed)
    return simulation, restraint


def _pull(simulation, restraint, stop, steps, chunk=10):
    """Move the restraint's centre linearly from where it is to ``stop`` (nm) over ``steps`` steps."""
    start = float(restraint.centers[0])
    for index in range(0, steps, chunk):
        restraint.centers.fill_(start + (stop - start) * min(1.0, (index + chunk) / steps))
        simulation.run(min(chunk, steps - index))


def pulled_sample(
    params: dict,
    seed: int,
    force_constant: float = 20000.0,
    pull_steps: int = 300,
    md_steps: int = 40,
    temperature: float = 300.0,
) -> dict[str, np.ndarray]:
    """Generator: a configuration at ``s ~ params["center"]`` (nm) with its GFN2-xTB energy and forces.

    A Langevin run (0.5 fs steps, ``temperature`` K) under GFN2-xTB plus a harmonic restraint
    ``force_constant / 2 (s - c)^2`` (kJ/mol/nm^2) whose centre ``c`` moves linearly from the
    reactant's ``s`` to ``params["center"]`` over ``pull_steps`` steps, then stays for
    ``md_steps`` steps. The labels are those of GFN2-xTB alone (no restraint).

    Returns:
        ``positions`` (14, 3) nm, ``atomic_numbers`` (14,), ``energy`` () kJ/mol, ``forces``
        (14, 3) kJ/mol/nm, ``reaction_coordinate`` () nm.
    """
    from mindsponge.labels import XTB, label

    system = reactant()
    xtb, colvar = XTB(system.atomic_numbers), reaction_coordinate()
    simulation, restraint = _restrained(system, xtb, force_constant, temperature, int(seed))
    _pull(simulation, restraint, float(params["center"]), pull_steps)
    simulation.run(md_steps)
    positions = simulation.state.positions.detach()
    labels = label(xtb, positions)
    return {
        "positions": positions.numpy(),
        "atomic_numbers": system.atomic_numbers.numpy().astype(np.int64),
        "energy": np.asarray(labels["energy"]),
        "forces": labels["forces"],
        "reaction_coordinate": np.asarray(float(colvar(positions, None))),
    }


def umbrella_profile(
    potential,
    centers,
    force_constant: float,
    temperature: float,
    steps: int,
    equilibration: int,
    every: int = 10,
    pull_steps: int = 200,
    seed: int = 0,
    progress: bool = True,
    replicas: bool = False,
    starts=None,
    labels=None,
):
    """Umbrella sampling along :func:`reaction_coordinate` with a ``(positions, box) -> energy`` potential.

    Where the windows start (``starts``):

    - ``"sequential"`` (the default without replicas): the first window starts from the reactant
      after ``pull_steps`` steps pulling the restraint to its centre; every later window starts
      from the last frame of the previous one (centres in increasing order);
    - ``"pulled"`` (the default, and the only choice, with replicas): the restraint is pulled through
      the centres one after the other, ``pull_steps`` steps to each, and the configuration reached
      at each centre starts its window, with velocities drawn afresh;
    - configurations ``(K, N, 3)`` nm, one per window in the order of increasing centres (e.g. the
      last frames another potential's windows returned): each window starts from its own, with
      velocities drawn afresh. A learned run started where the reference's windows ended samples
      the same ring near the transition state (see :func:`ring_conformation`).

    Each window runs ``equilibration`` steps, then ``steps`` steps sampled every ``every`` steps.
    The two protocols can give different profiles when the windows are too short to forget their
    start, so compare two potentials with the same ``starts``. With ``replicas=True`` (a potential
    with a ``replicated(count)`` method: a bound learned potential or committee) the windows run
    together as copies of the molecule (:mod:`mindsponge.replicas`), one network call per step for
    all; ``starts="pulled"`` without replicas runs the same protocol one window after the other
    (e.g. GFN2-xTB as the reference of a replicated learned potential).

    A reference run labels its own frames: ``labels``, a :class:`~mindsponge.labels.TrajectoryLabels`,
    records the production frames every ``labels.every`` steps with the energies and forces of
    ``potential`` alone (each window's restraint is taken out), training data spread over the
    whole reaction coordinate at no extra cost (``labels.labels()`` after the run).

    Returns:
        ``(umbrella, frames, seconds_per_step)``: the :class:`~mindsponge.bias.UmbrellaSampling`
        (call ``free_energy(edges)``), the last frame ``(N, 3)`` nm of every window as an array
        ``(K, N, 3)``, and the measured wall time per MD step of one window (s) over the
        production runs (with replicas: the time of a step of all windows over their number).

    Raises:
        TypeError: ``replicas=True`` with a potential that cannot be replicated.
        ValueError: ``starts`` not ``"sequential"``, ``"pulled"`` or finite ``(K, N, 3)``
            configurations for the ``K`` windows, ``"sequential"`` with replicas, or ``labels``
            with replicas (the copies are labelled by the potential being learned).
    """
    colvar = reaction_coordinate()
    centers = sorted(float(center) for center in centers)
    given = None if starts is None or isinstance(starts, str) else _given_starts(starts, len(centers))
    starts = ("pulled" if replicas else "sequential") if starts is None else starts
    if given is None and (starts not in ("sequential", "pulled") or (replicas and starts != "pulled")):
        raise ConfigurationError(
            f"umbrella_profile: starts must be 'sequential', 'pulled' ('pulled' with replicas=True) or "
            f"configurations (K, N, 3), got {starts!r} with replicas={replicas}"
        )
    if replicas and labels is not None:
        raise ConfigurationError("umbrella_profile: labels record a reference run, not replicas=True")
    if replicas and not hasattr(potential, "replicated"):
        raise ArgumentTypeError(
            f"umbrella_profile: replicas=True needs a potential with replicated(count) (a bound learned "
            f"potential or committee), got {type(potential).__name__}"
        )
    umbrella = bias_module.UmbrellaSampling(colvar, centers, force_constant, temperature)
    if given is None and starts == "sequential":
        return _sequential_windows(
            potential, umbrella, temperature, steps, equilibration, every, pull_steps, seed, progress, labels
        )
    if given is None:
        simulation, restraint = _restrained(reactant(), potential, force_constant, temperature, seed)
        given = []
        for center in umbrella.centers:
            _pull(simulation, restraint, center, pull_steps)
            given.append(simulation.state.positions.detach().clone())
    if replicas:
        return _replica_windows(given, potential, umbrella, temperature, steps, equilibration, every, seed)
    return _pulled_windows(
        given, potential, umbrella, temperature, steps, equilibration, every, seed, progress, labels
    )


def _given_starts(starts, count: int) -> list[torch.Tensor]:
    """Configurations ``(count, N, 3)`` nm as one float64 ``(N, 3)`` tensor per window (checked)."""
    frames = torch.as_tensor(np.asarray(starts, dtype=np.float64))
    atoms = len(reactant().atomic_numbers)
    if frames.shape != (count, atoms, 3) or not torch.isfinite(frames).all():
        raise ConfigurationError(
            f"umbrella_profile: starts must be finite configurations ({count}, {atoms}, 3) nm, one per "
            f"window, got shape {tuple(frames.shape)}"
            + ("" if frames.shape != (count, atoms, 3) else " with non-finite values")
        )
    return list(frames)


def _sequential_windows(
    potential, umbrella, temperature, steps, equilibration, every, pull_steps, seed, progress, labels
):
    """:func:`umbrella_profile` with each window started from the end of the previous one."""
    from tqdm.auto import tqdm

    simulation, restraint = _restrained(reactant(), potential, umbrella.force_constant, temperature, seed)
    _pull(simulation, restraint, umbrella.centers[0], pull_steps)
    frames, seconds = [], 0.0
    for window in tqdm(range(len(umbrella.centers)), desc="umbrella windows", disable=not progress):
        seconds += _sample_window(
            simulation, restraint, umbrella, window, equilibration, steps, every, labels
        )
        frames.append(simulation.state.positions.detach().cpu().numpy())
    return umbrella, np.stack(frames), seconds / (steps * len(umbrella.centers))


def _sample_window(simulation, restraint, umbrella, window, equilibration, steps, every, labels=None):
    """Move ``restraint`` to window ``window``'s centre, equilibrate, then run ``steps`` steps adding the
    CV every ``every`` steps to ``umbrella``'s samples (and the frames to ``labels``, without the
    restraint, if given); returns the wall time of the sampled steps (s)."""
    restraint.centers.fill_(umbrella.centers[window])
    simulation.run(equilibration)
    recorders = [bias_module.ColvarReporter(umbrella.colvar, every=every)]
    if labels is not None:
        labels.bias = restraint
        recorders.append(labels)
    simulation.reporters.extend(recorders)
    began = time.perf_counter()
    simulation.run(steps)
    seconds = time.perf_counter() - began
    for reporter in recorders:
        simulation.reporters.remove(reporter)
    umbrella.add_samples(window, recorders[0].values[:, 0])
    return seconds


def _pulled_windows(
    starts, potential, umbrella, temperature, steps, equilibration, every, seed, progress, labels
):
    """:func:`umbrella_profile` from the pulled ``starts`` (one ``(N, 3)`` tensor per window), one window
    after the other (window ``k`` with the seed ``seed + k``)."""
    from tqdm.auto import tqdm

    frames, seconds = [], 0.0
    for window in tqdm(range(len(starts)), desc="umbrella windows", disable=not progress):
        system = dataclasses.replace(reactant(), positions=starts[window])
        simulation, restraint = _restrained(
            system, potential, umbrella.force_constant, temperature, seed + window
        )
        seconds += _sample_window(
            simulation, restraint, umbrella, window, equilibration, steps, every, labels
        )
        frames.append(simulation.state.positions.detach().cpu().numpy())
    return umbrella, np.stack(frames), seconds / (steps * len(starts))


def _replica_windows(starts, potential, umbrella, temperature, steps, equilibration, every, seed):
    """:func:`umbrella_profile` from the pulled ``starts``, the windows run together as copies of the
    molecule (one run: no progress bar)."""
    from mindsponge.integrators import LangevinMiddle

    frames, seconds = umbrella.run_replicas(
        reactant(), potential, LangevinMiddle(_TIMESTEP, temperature, _FRICTION), steps, equilibration, every,
        starts=torch.stack(starts), seed=seed)
    return umbrella, frames, seconds


RING = (0, 1, 2, 3, 4, 5)  # C0-C1-O2-C3-C4-C5, closed by the breaking and the forming bond
RING_CLOSED_BELOW = 0.27  # nm: both O2-C3 and C0-C5 shorter, the six atoms form a (partial) ring
APART_BEYOND = 0.4  # nm: both O2-C3 and C0-C5 longer, the molecule has come apart (off the reaction)


def ring_conformation(positions) -> list[str]:
    """The conformation of the six-membered ring the transition region passes through, per frame.

    Near the transition state the six atoms C0-C1-O2-C3-C4-C5 form a ring closed by the breaking
    O2-C3 and the forming C0-C5 bond. It is a chair when the signs of its six ring torsions
    alternate all around (as in cyclohexane's chair), else a boat or twist-boat. The boat
    transition state lies higher than the chair, and a window restrained near the barrier keeps
    the one it started in for picoseconds: two umbrella profiles whose transition-region windows
    sampled different conformations have barriers that differ by that gap (GFN2-xTB: about
    14 kJ/mol), not by the potentials.

    Args:
        positions: ``(N, 3)`` or ``(K, N, 3)`` nm (a tensor or an array).

    A window can also leave the reaction: with both O2-C3 and C0-C5 long, ``s`` stays at the
    window's centre while the molecule comes apart in two fragments. GFN2-xTB never goes there
    at 300 K, but a learned potential that has seen no such frame can put it low in energy (a
    PaiNN trained on the reference's windows did): such a window's free energy is the model's
    artefact, and its frames belong in the next round of training.

    Returns:
        one of ``"chair"``, ``"boat"`` (boat or twist-boat), ``"open"`` (O2-C3 or C0-C5 at least
        ``RING_CLOSED_BELOW`` nm: no ring) or ``"apart"`` (both at least ``APART_BEYOND`` nm) per
        frame.

    Raises:
        ValueError: positions not of shape ``(N, 3)`` or ``(K, N, 3)`` with at least the six ring atoms.
    """
    if isinstance(positions, torch.Tensor):
        frames = positions.detach().to(torch.float64)
    else:
        frames = torch.as_tensor(np.asarray(positions, dtype=np.float64))
    frames = frames[None] if frames.dim() == 2 else frames
    if frames.dim() != 3 or frames.shape[-1] != 3 or frames.shape[1] < len(RING):
        raise ConfigurationError(
            f"ring_conformation: expected positions (N, 3) or (K, N, 3) in nm with N >= {len(RING)}, "
            f"got shape {tuple(np.shape(positions))}"
        )
    breaking, forming = Distance(BREAKING)(frames, None), Distance(FORMING)(frames, None)
    closed = torch.maximum(breaking, forming) < RING_CLOSED_BELOW
    apart = torch.minimum(breaking, forming) >= APART_BEYOND
    torsions = [Torsion([RING[(start + k) % len(RING)] for k in range(4)]) for start in range(len(RING))]
    signs = torch.sign(torch.stack([torsion(frames, None) for torsion in torsions], dim=-1))  # (K, 6)
    alternating = (signs * torch.roll(signs, -1, dims=1) < 0).all(dim=1)
    return [
        ("chair" if chair else "boat") if ring_closed else ("apart" if separated else "open")
        for chair, ring_closed, separated in zip(alternating.tolist(), closed.tolist(), apart.tolist())
    ]


def barrier_and_reaction(centers, free_energy, reactant_below: float = -0.1, product_above: float = 0.1):
    """Barrier and reaction free energy (kJ/mol) of a profile ``free_energy`` ``(B,)`` at ``centers`` (nm).

    The reactant basin is the minimum over ``s < reactant_below``, the product basin over
    ``s > product_above``, the transition state the maximum between them.

    Returns:
        ``(barrier, reaction, s_reactant, s_transition, s_product)``: ``G(TS) - G(R)``,
        ``G(P) - G(R)`` in kJ/mol and the three positions in nm.

    Raises:
        ValueError: a basin with no finite value.
    """
    centers, free_energy = np.asarray(centers), np.asarray(free_energy)
    finite = np.isfinite(free_energy)
    left, right = finite & (centers < reactant_below), finite & (centers > product_above)
    if not left.any() or not right.any():
        raise ConfigurationError(
            "barrier_and_reaction: the profile has no finite value in the reactant or product range"
        )
    r = np.flatnonzero(left)[np.argmin(free_energy[left])]
    p = np.flatnonzero(right)[np.argmin(free_energy[right])]
    between = np.arange(r, p + 1)
    between = between[finite[between]]
    t = between[np.argmax(free_energy[between])]
    return (
        float(free_energy[t] - free_energy[r]),
        float(free_energy[p] - free_energy[r]),
        float(centers[r]),
        float(centers[t]),
        float(centers[p]),
    )


_COLORS = {1: "lightgray", 6: "dimgray", 8: "red"}


def draw_molecule(ax, positions, atomic_numbers, title: str = ""):
    """Draw a configuration ``(N, 3)`` nm projected on its two main axes: atoms as discs, bonds
    (< 0.16 nm) as lines, the breaking and forming C-O/C-C pairs dashed with their distance."""
    positions = np.asarray(positions) - np.mean(positions, axis=0)
    _, _, axes = np.linalg.svd(positions, full_matrices=False)
    flat = positions @ axes[:2].T
    numbers = np.asarray(atomic_numbers)
    for i in range(len(flat)):
        for j in range(i + 1, len(flat)):
            distance = np.linalg.norm(positions[i] - positions[j])
            if (i, j) in (BREAKING, FORMING):
                ax.plot(*flat[[i, j]].T, "b--", lw=1)
                ax.annotate(f"{distance:.2f}", flat[[i, j]].mean(0), color="b", fontsize=8)
            elif distance < 0.16:
                ax.plot(*flat[[i, j]].T, "k-", lw=1.5)
    ax.scatter(
        *flat.T,
        s=[60 if z == 1 else 200 for z in numbers],
        c=[_COLORS.get(int(z), "green") for z in numbers],
        edgecolors="k",
        zorder=3,
    )
    ax.set_aspect("equal")
    ax.set_axis_off()
    ax.set_title(title)


SIZES = {
    "small": {
        "centers": (-0.30, 0.20, 17),
        "force_constant": 20000.0,
        "equilibration": 20,
        "steps": 60,
        "every": 4,
        "label_every": 20,
        "bins": 25,
        "active": "claisen_active_small.toml",
    },
    "full": {
        "centers": (-0.35, 0.35, 71),
        "force_constant": 100000.0,
        "equilibration": 1000,
        "steps": 6000,
        "every": 10,
        "label_every": 250,
        "bins": 100,
        "active": "claisen_active.toml",
    },
}
"""Sizes of ``notebooks/reactive_claisen.ipynb``: umbrella windows ``(first, last, count)`` in nm,
force constant kJ/mol/nm^2, equilibration and production steps (0.5 fs) per window, steps between
samples of the CV and between the reference's labelled frames, histogram bins of the profile, and
the active-learning configuration in ``datasets/active/``.

The full size spans both basins: the product's ``s`` runs to about 0.3 nm (``d(O2-C3)`` of the open
chain, 0.3-0.45 nm, less ``d(C0-C5)``, 0.154 nm), and a window range ending at 0.2 nm left the
product's free energy at the range's edge (a GFN2-xTB "reaction free energy" of +14.5 kJ/mol, still
falling there). The force constant holds each window within about 0.01 nm of its centre against the
free-energy slope near the transition state (about 1000 kJ/mol/nm): at 20000 kJ/mol/nm^2 the window
at -0.025 nm sat at +0.022 nm, and the windows left a gap across the barrier top. Its spread,
``sqrt(kT / k)`` = 0.005 nm at 300 K, overlaps windows 0.01 nm apart."""
