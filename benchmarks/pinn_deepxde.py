"""PINN peer benchmark: this suite's potential-formulation PINN against DeepXDE (PyTorch backend).

The same problem on both sides: MindElec's 2D TE point source (:func:`mindelec.pinn.point_source_problem`,
``formulation="potential"``) over ``[0, T]`` (1 ns with ``--quick``, 2 ns by default), one time window.
The same network: one sine MLP 4 -> 128 x 4 -> 1 (:func:`benchmarks/pinn.plain_model`, a DeepXDE
``FNN([4] + [128] * 4 + [1], "sin", ...)``) starting from the same weights (ours copied into DeepXDE's),
with the same input normalisation (DeepXDE ``apply_feature_transform``), the same hard zero initial
condition ``psi = amplitude (1 - exp(-t / tau))^2 net`` (``apply_output_transform``) and the same
source potential :class:`mindelec.pinn.PointSourcePotential` added to the network's. The same loss:
``mean(domain residual^2) + mean(source-disk residual^2) + mean(Mur residual^2)`` of the wave equation
``eps mu psi_tt - psi_xx - psi_yy + Mz`` and the first-order Mur condition on Ex, Ey, Hz. The same
budget: points per step (50 % domain, 25 % source disk, 25 % boundary, all redrawn every step),
Adam with the same learning rate and cosine decay (:class:`mindelec.pinn.Schedule`), the same steps.
The network is the main benchmark's: inputs normalised and multiplied by 4, the softened distance to the
source as a fourth input, both folded into DeepXDE's feature transform. ``--seeds`` initial weights, each
shared by both sides.

What differs is the method: ours takes value, gradient and Hessian of the potential in one forward-mode
pass (:class:`mindelec.pinn.PotentialTE`); DeepXDE takes them by reverse-mode autograd
(``dde.grad.jacobian`` / ``dde.grad.hessian``, one backward pass for the gradient and one per Hessian
row) and, by its design, evaluates the PDE residual at its boundary-condition points too. Differences
of the set-up, documented: DeepXDE's quasi-random samplers return the same points at every call, so
its points are pseudo-random (``"pseudo"``) where ours are scrambled Sobol (``--sampler uniform``: ours
pseudo-random too); DeepXDE averages the PDE
residual over all its PDE points (source-disk anchors, boundary and domain points), so the residual is
weighted per row to give our loss (domain and source-disk means, boundary rows weight 0).

Both runs are monitored every ``--monitors``-th of the steps against the FDTD reference
(:func:`mindelec.pinn.fdtd_reference`, relative L2 errors of Ex, Ey, Hz), with the monitoring time
excluded from the training times. Printed: seconds per step of each, both final errors, and last the
ratio "DeepXDE's training time to reach E / ours", E the larger of the two final largest-component
errors (so both runs reach it), per seed, then the median and range over the seeds.

Usage: ``python benchmarks/pinn_deepxde.py [--quick] [--steps N] [--batch N] [--output results.json]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

os.environ["DDE_BACKEND"] = "pytorch"

import deepxde as dde  # noqa: E402 - the backend is chosen by the environment variable above
import numpy as np  # noqa: E402
import pinn as pinn_benchmark  # noqa: E402 - benchmarks/pinn.py, the sibling benchmark
import torch  # noqa: E402

import mindelec as me  # noqa: E402

pinn = me.pinn
COMPONENTS = ("Ex", "Ey", "Hz")


class TimedReference:
    """An :class:`mindelec.pinn.FDTDReference` that times its error evaluations, so that training time
    excludes them.

    Call :meth:`start` when training starts; every :meth:`relative_errors` call then records the training
    seconds so far (wall time since the start minus the time spent in earlier evaluations) in
    :attr:`seconds` and the largest component error in :attr:`largest`.
    """

    def __init__(self, reference: pinn.FDTDReference):
        self.reference = reference
        self.begin, self.monitoring = 0.0, 0.0
        self.seconds: list[float] = []
        self.largest: list[float] = []
        self.errors: dict[str, float] = {}

    def start(self) -> None:
        """Reset the records and start the training clock."""
        self.begin, self.monitoring, self.seconds, self.largest = time.perf_counter(), 0.0, [], []

    def elapsed(self) -> float:
        """Training seconds since :meth:`start` (monitoring excluded)."""
        return time.perf_counter() - self.begin - self.monitoring

    def relative_errors(self, model, scales, components, parameters=(), chunk=65536) -> dict[str, float]:
        """As :meth:`mindelec.pinn.FDTDReference.relative_errors`, recording the training time and errors."""
        called = time.perf_counter()
        self.seconds.append(self.elapsed())
        self.errors = self.reference.relative_errors(model, scales, components, parameters, chunk)
        self.largest.append(max(self.errors.values()))
        self.monitoring += time.perf_counter() - called
        return self.errors


class DeepXDEPotential:
    """The potential formulation written for DeepXDE: residuals of ``(inputs, outputs)`` by ``dde.grad``.

    ``outputs`` is the network's potential ``psi`` ``(B, 1)`` at dimensionless points ``inputs`` ``(B, 3)``
    (x, y, t); the source's quasi-static potential (value, gradient and Hessian from ``particular``, which
    has no parameters) is added to the network's derivatives.

    Args:
        problem: a potential-formulation problem of :func:`mindelec.pinn.point_source_problem` (one
            permittivity, not a range).
        particular: the :class:`mindelec.pinn.PointSourcePotential` of the model (``None``: none).
        permeability: relative permeability of the medium.
    """

    def __init__(self, problem, particular: pinn.PointSourcePotential | None, permeability: float = 1.0):
        if problem.permittivity is None:
            raise ValueError("DeepXDEPotential: problem must have one permittivity, not a parameter range")
        self.scales, self.source, self.particular = problem.scales, problem.point_source, particular
        self.permittivity, self.permeability = problem.permittivity, float(permeability)
        self._cached: tuple[torch.Tensor, torch.Tensor] | None = None

    def source_jet(self, inputs: torch.Tensor) -> torch.Tensor:
        """(B, 10) :data:`mindelec.pinn.POTENTIAL_JET` of the source potential (zeros without one).

        Computed once per ``inputs`` tensor: DeepXDE calls the PDE and each boundary condition on the
        same tensor within a step.
        """
        if self._cached is not None and self._cached[0] is inputs:
            return self._cached[1]
        points = inputs.detach()
        if self.particular is None:
            jet = torch.zeros(len(points), len(pinn.POTENTIAL_JET), dtype=points.dtype)
        else:
            jet = self.particular(points)
        self._cached = (inputs, jet)
        return jet

    def hessian(self, inputs: torch.Tensor, outputs: torch.Tensor, i: int, j: int) -> torch.Tensor:
        """``d2 psi / dx_i dx_j`` ``(B,)`` of network plus source potential (0, 1, 2: x, y, t)."""
        pair = pinn.POTENTIAL_JET.index("psi_" + "".join(sorted("xyt"[i] + "xyt"[j], key="xyt".index)))
        return dde.grad.hessian(outputs, inputs, i=i, j=j)[:, 0] + self.source_jet(inputs)[:, pair]

    def wave(self, inputs: torch.Tensor, outputs: torch.Tensor) -> torch.Tensor:
        """``eps mu psi_tt - psi_xx - psi_yy + Mz`` ``(B,)``, Mz the source's magnetic current density."""
        current = self.source.dimensionless(inputs.detach(), self.scales, magnetic=True)
        return (
            self.permittivity * self.permeability * self.hessian(inputs, outputs, 2, 2)
            - self.hessian(inputs, outputs, 0, 0)
            - self.hessian(inputs, outputs, 1, 1)
            + current
        )

    def mur(self, inputs: torch.Tensor, outputs: torch.Tensor, normals: torch.Tensor) -> torch.Tensor:
        """``dF/dt + v n.grad F`` for F = Ex = psi_y, Ey = -psi_x, Hz = eps psi_t: ``(B, 3)``.

        ``normals``: (B, 2) outward normals; ``v = 1 / sqrt(eps mu)``.
        """
        speed = (self.permittivity * self.permeability) ** -0.5

        def mur(a):  # of d psi / d x_a
            row = [self.hessian(inputs, outputs, a, b) for b in range(3)]
            return row[2] + speed * (normals[:, 0] * row[0] + normals[:, 1] * row[1])

        return torch.stack([mur(1), -mur(0), self.permittivity * mur(2)], 1)


class DeepXDEFields(torch.nn.Module):
    """Ex, Ey, Hz ``(B, 3)`` of a DeepXDE potential network at dimensionless points ``(B, 3)``, by autograd.

    For :meth:`mindelec.pinn.FDTDReference.relative_errors` (which evaluates under ``no_grad``).
    """

    def __init__(self, net: torch.nn.Module, formulation: DeepXDEPotential):
        super().__init__()
        self.net, self.formulation = net, formulation

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            points = inputs.detach().requires_grad_()
            (gradient,) = torch.autograd.grad(self.net(points).sum(), points)
        jet = torch.cat([torch.zeros_like(gradient[:, :1]), gradient], 1)
        if self.formulation.particular is not None:
            jet = jet + self.formulation.particular(inputs)[:, :4]
        return pinn.potential_fields(jet, self.formulation.permittivity)


def deepxde_network(model: pinn.PotentialTE) -> torch.nn.Module:
    """DeepXDE ``FNN`` with the same layers, weights, input features and initial ramp as ``model``.

    Args:
        model: a :class:`mindelec.pinn.PotentialTE` on a one-scale sine MultiScaleMLP of unit ``w0``
            (``FNN``'s ``"sin"`` is ``sin(x)``), with or without the radial input.

    Returns:
        ``dde.nn.FNN`` ``(B, 3) -> (B, 1)``: the potential ``psi`` without the source's, in the dtype of
        ``model``. Its feature transform is ours: the softened distance to the source appended (if the
        model takes it), then the input normalisation times the sub-network's scale (``--input-frequency``).
    """
    network = model.network
    if len(network.subnetworks) != 1:
        raise ValueError(f"deepxde_network: model must have one sub-network, got scales {network.scales}")
    mlp = network.subnetworks[0]
    if mlp.activation.w0 != 1.0:
        raise ValueError(
            f"deepxde_network: the sine must have w0 = 1 (DeepXDE's 'sin'), got {mlp.activation}"
        )
    layers = [*mlp.hidden, mlp.readout]
    sizes = [layers[0].in_features] + [layer.out_features for layer in layers]
    net = dde.nn.FNN(sizes, "sin", "Glorot uniform").to(mlp.readout.weight.dtype)
    with torch.no_grad():
        for target, layer in zip(net.linears, layers):
            target.weight.copy_(layer.weight)
            target.bias.copy_(layer.bias)
    center, scale = network.input_center.clone(), network.input_scale.clone() * network.scales[0]
    radial_center, softening = model.radial_center, model.radial_softening
    tau, amplitude = model.tau, model.amplitude

    def features(inputs):
        if radial_center is not None:
            offset = inputs[:, :2] - torch.tensor(radial_center, dtype=inputs.dtype)
            distance = torch.sqrt(offset.pow(2).sum(1, keepdim=True) + softening**2)
            inputs = torch.cat([inputs, distance], 1)
        return (inputs - center) * scale

    net.apply_feature_transform(features)
    net.apply_output_transform(
        lambda inputs, psi: amplitude * (1 - torch.exp(-inputs[:, 2:3] / tau)) ** 2 * psi
    )
    return net


class _Resample(dde.callbacks.Callback):
    """New domain, boundary and source-disk points after every step (the Trainer's ``resample_every=1``)."""

    def __init__(self, disk, n_source: int):
        super().__init__()
        self.disk, self.n_source = disk, n_source

    def on_epoch_end(self):
        data = self.model.data
        data.anchors = self.disk.random_points(self.n_source, random="pseudo").astype(dde.config.real(np))
        data.resample_train_points(pde_points=True, bc_points=True)


class _Monitor(dde.callbacks.Callback):
    """Errors against the reference every ``every`` steps (timed out of training by ``reference``)."""

    def __init__(self, reference: TimedReference, fields, scales, every: int):
        super().__init__()
        self.reference, self.fields, self.scales, self.every = reference, fields, scales, every
        self.steps: list[int] = []

    def on_epoch_end(self):
        step = self.model.train_state.step
        if step % self.every == 0:
            self.steps.append(step)
            self.reference.relative_errors(self.fields, self.scales, COMPONENTS)


def train_deepxde(problem, scales, model, reference, schedule, monitor_every):
    """Train DeepXDE's copy of ``model`` (:func:`deepxde_network`) on the same problem and budget.

    Args:
        problem, scales: from :func:`benchmarks/pinn.build` (``batch`` points per step).
        model: the untrained :class:`mindelec.pinn.PotentialTE` whose weights DeepXDE starts from.
        reference: a :class:`TimedReference`.
        schedule: a :class:`mindelec.pinn.Schedule` of one phase (steps, learning rate per step).
        monitor_every: steps between error evaluations.

    Returns:
        ``{"steps", "seconds", "largest", "errors", "seconds_per_step"}`` (monitored steps, training
        seconds and largest component errors at them; final errors).
    """
    constraints = problem.constraints
    n_domain, n_source = constraints["maxwell"].n_points, constraints["source"].n_points
    n_boundary = constraints["mur"].n_points
    lower, upper = (bound.tolist() for bound in problem.domain.bounds_float64)
    rectangle = dde.geometry.Rectangle(lower[:2], upper[:2])
    time_domain = dde.geometry.TimeDomain(lower[2], upper[2])
    geometry = dde.geometry.GeometryXTime(rectangle, time_domain)
    source = problem.point_source
    center = [(p - o) / scales.length for p, o in zip(source.position, scales.origin)]
    disk = dde.geometry.Disk(center, 4 * source.radius / scales.length) & rectangle
    disk_time = dde.geometry.GeometryXTime(disk, time_domain)
    formulation = DeepXDEPotential(problem, model.particular)
    state = {}

    def pde(inputs, outputs):
        # rows: boundary-condition points, then DeepXDE's PDE points: source-disk anchors, boundary, domain;
        # weights so that DeepXDE's mean over the PDE rows is our domain mean plus source-disk mean
        rows = len(inputs) - sum(state["data"].num_bcs)
        weights = torch.zeros(len(inputs), dtype=outputs.dtype)
        weights[len(inputs) - rows : len(inputs) - rows + n_source] = (rows / n_source) ** 0.5
        weights[len(inputs) - n_domain :] = (rows / n_domain) ** 0.5
        return weights * formulation.wave(inputs, outputs)

    def mur(inputs, outputs, points):
        normals = torch.as_tensor(geometry.boundary_normal(points)[:, :2], dtype=outputs.dtype)
        return formulation.mur(inputs, outputs, normals)

    boundary = dde.icbc.OperatorBC(geometry, mur, lambda x, on_boundary: on_boundary)
    anchors = disk_time.random_points(n_source, random="pseudo")
    data = dde.data.TimePDE(
        geometry,
        pde,
        [boundary],
        num_domain=n_domain,
        num_boundary=n_boundary,
        train_distribution="pseudo",
        anchors=anchors,
    )
    state["data"] = data
    net = deepxde_network(model)
    dde_model = dde.Model(data, net)
    steps = schedule.steps
    dde_model.compile("adam", lr=schedule.learning_rate, decay=("lambda", schedule.factor))
    monitor = _Monitor(reference, DeepXDEFields(net, formulation), scales, monitor_every)
    reference.start()
    dde_model.train(
        iterations=steps, display_every=steps, callbacks=[_Resample(disk_time, n_source), monitor]
    )
    seconds = reference.elapsed()
    return {
        "steps": monitor.steps,
        "seconds": reference.seconds,
        "largest": reference.largest,
        "errors": dict(reference.errors),
        "seconds_per_step": seconds / steps,
    }


def train_ours(problem, scales, model, reference, schedule, monitor_every):
    """Train ``model`` on ``problem`` by ``schedule`` (:class:`common.pde.Trainer`, points redrawn every step,
    the learning rate of :meth:`mindelec.pinn.Schedule.factor`); same record as :func:`train_deepxde`."""
    trainer = schedule.trainer(
        problem,
        model,
        monitor=pinn.reference_monitor(reference, scales),
        monitor_every=monitor_every,
        progress=False,
    )
    reference.start()
    trainer.fit()
    return {
        "steps": trainer.history["monitor_step"],
        "seconds": reference.seconds,
        "largest": reference.largest,
        "errors": dict(reference.errors),
        "seconds_per_step": reference.elapsed() / schedule.steps,
    }


def time_to(run, target):
    """Training seconds at the first monitored step whose largest component error is <= ``target``."""
    for seconds, error in zip(run["seconds"], run["largest"]):
        if error <= target:
            return seconds
    return None


def parse_arguments(argv=None) -> argparse.Namespace:
    """The command line, with the size-dependent defaults filled in."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="CI-sized run (1 ns, 200 steps, one seed; a minute or two)"
    )
    parser.add_argument("--steps", type=int, default=None, help="Adam steps of each run (2000; quick 200)")
    parser.add_argument(
        "--batch", type=int, default=None, help="collocation points per step (1024; quick 512)"
    )
    parser.add_argument("--duration", type=float, default=None, help="simulated time (s; 2e-9, quick 1e-9)")
    parser.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (cosine decay to 1/100)")
    parser.add_argument("--seeds", type=int, default=None, help="initial weights drawn per side (3; quick 1)")
    parser.add_argument("--monitors", type=int, default=10, help="error evaluations per run")
    parser.add_argument(
        "--sampler",
        choices=("sobol", "uniform"),
        default="sobol",
        help="our collocation points: scrambled Sobol (the suite's default) or pseudo-random (as DeepXDE's)",
    )
    parser.add_argument("--output", default=None, help="write the figures to this JSON file")
    args = parser.parse_args(argv)
    args.steps = args.steps or (200 if args.quick else 2000)
    args.batch = args.batch or (512 if args.quick else 1024)
    args.duration = args.duration or (1e-9 if args.quick else 2e-9)
    args.seeds = args.seeds or (1 if args.quick else 3)
    return args


def compare(args, problem, scales, reference, seed):
    """Both sides from the same initial weights (drawn with ``seed``); the record of each and the ratio."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    softening = 0.05 / scales.length  # the main benchmark's network: radial input, inputs times 4
    model = pinn_benchmark.plain_model(problem, "potential", softening, 4.0)
    schedule = pinn.Schedule(args.steps, args.lr, windows=1, whole_fraction=1.0)
    monitor_every = max(args.steps // args.monitors, 1)
    deepxde_run = train_deepxde(problem, scales, model, reference, schedule, monitor_every)
    ours = train_ours(problem, scales, model, reference, schedule, monitor_every)
    target = max(max(ours["errors"].values()), max(deepxde_run["errors"].values()))
    ratio = time_to(deepxde_run, target) / time_to(ours, target)
    for name, run in (("ours (forward-mode jet)", ours), ("DeepXDE (reverse-mode autograd)", deepxde_run)):
        errors = run["errors"]
        print(
            f"seed {seed}, {name}: {run['seconds_per_step'] * 1e3:.1f} ms/step, final Ex {errors['Ex']:.4f}  "
            f"Ey {errors['Ey']:.4f}  Hz {errors['Hz']:.4f} after {args.steps} steps x {args.batch} points"
        )
    print(f"seed {seed}: time to largest component error {target:.4f}, DeepXDE / ours = {ratio:.2f}")
    return {"ours": ours, "deepxde": deepxde_run, "target": target, "ratio": ratio}


def main(argv=None):
    args = parse_arguments(argv)
    torch.set_num_threads(1)
    dde.config.set_default_float("float32")  # as our model
    setup = dataclasses.replace(pinn.PointSourceSetup(), duration=args.duration)
    start = time.perf_counter()
    reference = TimedReference(pinn.fdtd_reference(setup, cell_size=5e-3, frames=10, stride=4))
    print(
        f"FDTD reference (5 mm cells, [0, {args.duration * 1e9:g} ns]): {time.perf_counter() - start:.1f} s"
    )
    problem, scales = pinn_benchmark.build(setup, args.batch, "potential")
    for constraint in problem.constraints.values():
        constraint.sampler = args.sampler
    runs = [compare(args, problem, scales, reference, seed) for seed in range(args.seeds)]
    ratios = sorted(run["ratio"] for run in runs)
    results = {
        "arguments": vars(args),
        "evaluations": args.steps * args.batch,
        "runs": runs,
        "ratios": ratios,
    }
    if args.output:
        with open(args.output, "w") as handle:
            json.dump(results, handle, indent=1)
    median = ratios[len(ratios) // 2]
    print(
        f"time to equal error, DeepXDE / ours over {len(ratios)} seeds: median {median:.2f} "
        f"(range {ratios[0]:.2f}-{ratios[-1]:.2f})"
    )
    return results


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
