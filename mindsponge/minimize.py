"""Energy minimisation: L-BFGS and FIRE, with constraints.

Both minimisers stop when the largest atomic force (its Euclidean norm, kJ/mol/nm) drops below
``tolerance`` or after ``max_iterations`` iterations. With constraints, forces are projected
on the constraint surface (their components along constrained distances removed, the RATTLE
projection with unit weights) and positions are put back on it after every move (SHAKE /
SETTLE), so rigid water stays rigid.

- ``"lbfgs"``: limited-memory BFGS (Nocedal & Wright, Algorithm 7.4; 10 pairs of history) with
  a backtracking line search on the Armijo condition; no atom moves more than ``max_step`` per
  iteration. Near a minimum the energy change of a step falls below what the energy's precision
  resolves (a float32 energy of -41,000 kJ/mol moves in steps of 0.004 kJ/mol, as learned potentials
  and mixed precision give it): there the line search accepts a step on the forces, by Hager and
  Zhang's approximate Wolfe condition (SIAM J. Optim. 16, 170 (2005)): the energy no higher than
  the start within its resolution, and the slope along the direction no steeper uphill than it was
  downhill. It converges at the default precision in about as many iterations as in double.

- ``"fire"``: the Fast Inertial Relaxation Engine (Bitzek et al., PRL 97, 170201 (2006)) with
  unit masses and its standard parameters.

Overlapping atoms (two atoms 0.01 nm apart have forces of 1e5-1e20 kJ/mol/nm) are recovered as
OpenMM's ``LocalEnergyMinimizer`` recovers them: while the largest force exceeds
``SOFT_START_FORCE`` (1e5 kJ/mol/nm) L-BFGS keeps no curvature history, so each iteration is a
steepest-descent step capped at ``max_step`` per atom (the forces are used for their direction
only, never integrated); forces are projected on the constraint surface after scaling them to
unit size (so RATTLE's tolerance does not meet forces of 1e20), and a trial move that the
constraints cannot follow is shortened instead of failing.

Units: nm, kJ/mol, kJ/mol/nm.
"""

from dataclasses import dataclass

import torch

from common import checks
from common.deprecation import renamed_arguments
from common.errors import ConfigurationError
from common.progress import bar as progress_bar
from mindsponge.constraints import ConstraintError

__all__ = ["MinimizationResult", "minimize"]

METHODS = ("lbfgs", "fire")
# above this largest atomic force (kJ/mol/nm) atoms overlap or nearly so: L-BFGS takes capped
# steepest-descent steps and keeps no curvature history until the forces are back below it
SOFT_START_FORCE = 1e5


@dataclass(frozen=True)
class MinimizationResult:
    """Outcome of :func:`minimize`.

    Attributes:
        positions: (N, 3) tensor, nm.
        energy: final potential energy, kJ/mol.
        max_force: largest atomic force norm at the end, kJ/mol/nm.
        iterations: iterations taken.
        converged: whether ``max_force < tolerance``.
    """

    positions: torch.Tensor
    energy: float
    max_force: float
    iterations: int
    converged: bool


class _Problem:
    """Energy and projected forces on the constraint surface."""

    def __init__(self, energy_and_forces, masses, box, constraints, compute_dtype=None):
        self.energy_and_forces = energy_and_forces
        self.masses, self.box, self.constraints = masses, box, constraints
        # relative precision of the energies: the compute dtype's, or the lowest seen
        self.epsilon = torch.finfo(compute_dtype or torch.float64).eps

    def evaluate(self, positions):
        energy, forces = self.energy_and_forces(positions, self.box)
        for value in (energy, forces):
            if value.dtype.is_floating_point:
                self.epsilon = max(self.epsilon, torch.finfo(value.dtype).eps)
        forces = self.project(positions, forces.to(positions.dtype))
        forces = torch.where((self.masses > 0)[:, None], forces, torch.zeros_like(forces))
        return energy.to(positions.dtype), forces

    def project(self, positions, vectors):
        """``vectors`` (N, 3) without components along the constrained distances (unit weights).

        The projection is linear; it is done on the vectors scaled to a largest component of 1,
        so that RATTLE's tolerance means the same for the huge forces of overlapping atoms.
        """
        if self.constraints is None:
            return vectors
        scale = vectors.abs().max()
        if not scale > 0 or not torch.isfinite(scale):
            return vectors
        return self.constraints.velocities(positions, vectors / scale, torch.ones_like(self.masses)) * scale

    def resolution(self, energy):
        """The smallest energy change (kJ/mol) the energies resolve around ``energy``: a few units in the
        last place of the lowest precision the energy or forces came in."""
        return 4.0 * self.epsilon * max(abs(float(energy)), 1.0)

    def move(self, positions, displacement):
        """Positions moved by ``displacement`` and put back on the constraint surface; raises
        :class:`~mindsponge.constraints.ConstraintError` when that fails (the caller shortens the step)."""
        moved = positions + displacement
        if self.constraints is not None:
            moved = self.constraints.positions(positions, moved, self.masses)
        return moved


def _max_norm(vectors):
    return float(torch.linalg.vector_norm(vectors, dim=-1).max())


def _lbfgs(problem, positions, tolerance, max_iterations, max_step, bar, history=10):
    energy, forces = problem.evaluate(positions)
    steps, changes = [], []
    iteration = 0
    for iteration in range(1, max_iterations + 1):  # noqa: B007 (the count is returned)
        largest = _max_norm(forces)
        if largest < tolerance:
            return positions, energy, forces, iteration - 1
        if largest > SOFT_START_FORCE:  # overlapping atoms: capped steepest descent, no curvature
            steps, changes = [], []
        direction = _lbfgs_direction(forces, steps, changes)
        slope = float((direction * -forces).sum())
        if slope >= 0:  # not a descent direction: restart from steepest descent
            steps, changes = [], []
            direction, slope = forces, float(-(forces * forces).sum())
        trial = _line_search(problem, positions, energy, direction, slope, max_step)
        if trial is None:  # no decrease resolvable at this precision
            return positions, energy, forces, iteration
        trial, trial_energy, trial_forces = trial
        steps.append(trial - positions)
        changes.append(forces - trial_forces)  # gradient change
        if float((steps[-1] * changes[-1]).sum()) <= 0:
            steps.pop()
            changes.pop()
        del steps[:-history], changes[:-history]
        positions, energy, forces = trial, trial_energy, trial_forces
        bar.update(1)
    return positions, energy, forces, iteration


def _lbfgs_direction(forces, steps, changes):
    """The L-BFGS search direction: the two-loop recursion over the stored steps and gradient changes."""
    gradient = -forces
    direction = -gradient
    coefficients = []
    for step, change in reversed(list(zip(steps, changes, strict=True))):
        rho = 1.0 / (change * step).sum()
        coefficient = rho * (step * direction).sum()
        coefficients.append((rho, coefficient))
        direction = direction - coefficient * change
    if steps:
        direction = direction * ((steps[-1] * changes[-1]).sum() / (changes[-1] * changes[-1]).sum())
    for (step, change), (rho, coefficient) in zip(
        zip(steps, changes, strict=True), reversed(coefficients), strict=True
    ):
        direction = direction + step * (coefficient - rho * (change * direction).sum())
    return direction


def _line_search(problem, positions, energy, direction, slope, max_step, armijo=1e-4):
    """Backtracking along ``direction``, the first step at most ``max_step`` per atom: ``(positions,
    energy, forces)`` of the first step that meets the Armijo condition, or, where the energy change is
    within the energy's resolution, the approximate Wolfe condition on the forces (module docstring);
    ``None`` after 30 halvings."""
    length = min(1.0, max_step / max(_max_norm(direction), 1e-30))
    resolution = problem.resolution(energy)
    for _ in range(30):
        try:
            trial = problem.move(positions, length * direction)
        except ConstraintError:  # the constraints cannot follow so long a move: shorten it
            length *= 0.5
            continue
        trial_energy, trial_forces = problem.evaluate(trial)
        if float(trial_energy) <= float(energy) + armijo * length * slope:
            return trial, trial_energy, trial_forces
        if float(trial_energy) <= float(energy) + resolution:  # the energies cannot tell: the forces do
            trial_slope = float((direction * -trial_forces).sum())
            if trial_slope <= (2 * armijo - 1) * slope:
                return trial, trial_energy, trial_forces
        length *= 0.5
    return None


def _fire(problem, positions, tolerance, max_iterations, max_step, bar):
    dt, dt_max, alpha = 1e-3, 1e-2, 0.1
    energy, forces = problem.evaluate(positions)
    velocities = torch.zeros_like(positions)
    since_negative = 0
    iteration = 0
    for iteration in range(1, max_iterations + 1):  # noqa: B007 (the count is returned)
        if _max_norm(forces) < tolerance:
            return positions, energy, forces, iteration - 1
        power = float((forces * velocities).sum())
        if power > 0:
            force_norm = torch.linalg.vector_norm(forces)
            velocity_norm = torch.linalg.vector_norm(velocities)
            velocities = (1 - alpha) * velocities + alpha * velocity_norm * forces / force_norm
            since_negative += 1
            if since_negative > 5:
                dt, alpha = min(1.1 * dt, dt_max), 0.99 * alpha
        else:
            velocities = torch.zeros_like(velocities)
            since_negative, dt, alpha = 0, 0.5 * dt, 0.1
        velocities = velocities + dt * forces
        displacement = dt * velocities
        largest = _max_norm(displacement)
        if largest > max_step:
            displacement = displacement * (max_step / largest)
        try:
            positions = problem.move(positions, displacement)
        except ConstraintError:  # the constraints cannot follow: stop, and restart more gently
            velocities = torch.zeros_like(velocities)
            since_negative, dt, alpha = 0, 0.5 * dt, 0.1
            continue
        energy, forces = problem.evaluate(positions)
        velocities = problem.project(positions, velocities)
        bar.update(1)
    return positions, energy, forces, iteration


@renamed_arguments(force="energy_and_forces")
def minimize(
    energy_and_forces,
    positions,
    masses,
    box=None,
    constraints=None,
    tolerance=10.0,
    max_iterations=1000,
    method="lbfgs",
    max_step=0.01,
    progress=True,
    compute_dtype=None,
):
    """Minimise a potential energy from ``positions``.

    Args:
        energy_and_forces: callable ``(positions, box) -> (energy, forces)`` in kJ/mol and
            kJ/mol/nm (as :meth:`mindsponge.simulation.Simulation.energy_and_forces`); ``force=``
            is its deprecated keyword.
        positions: (N, 3) tensor, nm; the dtype of the minimisation.
        masses: (N,) tensor, amu (massless particles are not moved; masses weight SETTLE).
        box: (3, 3) tensor, nm, or ``None``.
        constraints: :class:`~mindsponge.constraints.Constraints` or ``None``.
        tolerance: stop when the largest atomic force norm is below this, kJ/mol/nm.
        max_iterations: iteration limit.
        method: ``"lbfgs"`` or ``"fire"``.
        max_step: largest displacement of an atom in one iteration, nm.
        progress: show a tqdm progress bar (rate-limited when standard error is not a terminal).
        compute_dtype: the dtype the energies and forces were computed in, when they come back in a
            more precise one (mixed precision: float32 terms summed in float64); default: the dtypes
            they come in. Sets the energy resolution below which the line search decides on the forces.

    Returns:
        :class:`MinimizationResult`.

    Raises:
        ValueError: an unknown method or non-positive tolerance or iteration limit.
    """
    if method not in METHODS:
        raise ConfigurationError(f"method must be one of {METHODS}, got {method!r}")
    if not tolerance > 0:
        raise ConfigurationError(f"tolerance must be a positive force in kJ/mol/nm, got {tolerance!r}")
    checks.positive_int(max_iterations, "max_iterations")
    problem = _Problem(energy_and_forces, masses, box, constraints, compute_dtype)
    if constraints is not None:
        positions = constraints.positions(positions, positions, masses)
    run = _lbfgs if method == "lbfgs" else _fire
    with progress_bar(
        total=max_iterations, enabled=progress, unit="iter", desc=f"minimize ({method})"
    ) as bar:
        positions, energy, forces, iterations = run(
            problem, positions, tolerance, max_iterations, max_step, bar
        )
    max_force = _max_norm(forces)
    return MinimizationResult(positions, float(energy), max_force, iterations, max_force < tolerance)
