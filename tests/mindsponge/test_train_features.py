"""Trainer features against independent computations: least-squares energy references, splits (random,
by trajectory, stored in the dataset and the checkpoint), the moving average of the weights, gradient
clipping, the loss-weight schedule, float64 and bit-for-bit resumption. The labels come from an
analytic Morse pair potential plus per-element energies (no xTB needed)."""

import time

import numpy as np
import pytest
import torch

import mindsponge as ms
from common.errors import ConfigurationError
from common.io import H5Writer, load_checkpoint
from mindsponge.train import DatasetError, Trainer, TrainingData
from mindsponge.training import make_split, read_split, store_split

ELEMENT_ENERGY = {1: -1312.0, 6: -99120.0, 8: -197300.0}  # kJ/mol
NUMBERS = np.array([6, 8, 1, 1, 1])


def morse(positions):
    """Morse energy (kJ/mol) of all pairs of positions (..., N, 3) nm: D (1 - exp(-a (r - r0)))^2."""
    difference = positions[..., :, None, :] - positions[..., None, :, :]
    n = positions.shape[-2]
    upper = torch.triu_indices(n, n, 1)
    distances = difference[..., upper[0], upper[1], :].norm(dim=-1)
    return (300.0 * (1.0 - torch.exp(-20.0 * (distances - 0.12))) ** 2).sum(-1)


def synthetic(samples=40, trajectories=8, seed=0):
    """Molecules of 5 atoms around a reference geometry: positions (S, 5, 3), Morse + per-element
    energies (S,) and forces (S, 5, 3), trajectory ids (S,)."""
    generator = torch.Generator().manual_seed(seed)
    base = torch.tensor([[0.0, 0, 0], [0.14, 0, 0], [-0.05, 0.09, 0], [-0.05, -0.05, 0.08], [0.19, 0.08, 0]],
                        dtype=torch.float64)
    positions = (base + 0.01 * torch.randn(samples, 5, 3, generator=generator, dtype=torch.float64))
    positions.requires_grad_(True)
    energy = morse(positions)
    (gradient,) = torch.autograd.grad(energy.sum(), positions)
    energy = energy.detach() + sum(ELEMENT_ENERGY[int(z)] for z in NUMBERS)
    groups = np.repeat(np.arange(trajectories), samples // trajectories)
    return positions.detach().numpy(), energy.numpy(), -gradient.numpy(), groups


def dataset(**options):
    positions, energy, forces, groups = synthetic(**options)
    return TrainingData.from_arrays(positions, NUMBERS, energy, forces, groups=groups)


def small_model(dtype=torch.float64):
    torch.manual_seed(0)
    return ms.potentials.PaiNN(features=16, interactions=1, n_rbf=8).to(dtype)


def test_energy_references_reproduce_additive_energies():
    """Energies that are sums of per-element values over several compositions: the least-squares
    references reproduce every energy exactly, so a model with zero network output has zero error."""
    rng = np.random.default_rng(0)
    compositions = [rng.choice([1, 6, 8], size=rng.integers(2, 7)) for _ in range(30)]
    numbers = torch.tensor(np.concatenate(compositions))
    batch = torch.repeat_interleave(torch.arange(30), torch.tensor([len(c) for c in compositions]))
    energies = torch.tensor([sum(ELEMENT_ENERGY[int(z)] for z in c) for c in compositions],
                            dtype=torch.float64)
    model = small_model()
    model.fit_statistics(energies, numbers, batch)
    references = {z: float(model.element_shift[model.elements.index(z)]) for z in ELEMENT_ENERGY}
    fitted = torch.tensor([sum(references[int(z)] for z in c) for c in compositions], dtype=torch.float64)
    torch.testing.assert_close(fitted, energies, atol=1e-6, rtol=0)
    for z, value in ELEMENT_ENERGY.items():
        assert abs(references[z] - value) < 1e-6


def test_splits_random_grouped_and_stored(tmp_path):
    data = dataset()
    random = make_split(data, 0.2, 0.2, by="random", seed=1)
    assert sorted(sum(random.values(), [])) == list(range(40))
    assert [len(random[k]) for k in ("train_indices", "validation_indices", "test_indices")] == [24, 8, 8]
    grouped = make_split(data, 0.25, 0.25, by="group", seed=1)
    names = ("train_indices", "validation_indices", "test_indices")
    parts = [set(data.groups[grouped[k]].tolist()) for k in names]
    assert len(parts[1]) == 2 and len(parts[2]) == 2 and len(parts[0]) == 4
    assert not (parts[0] & parts[1]) and not (parts[0] & parts[2]) and not (parts[1] & parts[2])
    with pytest.raises(DatasetError, match="'group' column"):
        make_split(TrainingData.from_arrays(*[np.asarray(a) for a in synthetic()[:1]], NUMBERS,
                                            *synthetic()[1:3]), 0.2, by="group")
    # stored in the dataset file, next to the table, and read back by from_hdf5
    positions, energy, forces, groups = synthetic()
    path = tmp_path / "data.h5"
    with H5Writer(path) as writer:
        for k in range(len(energy)):
            writer.append({"positions": positions[k], "atomic_numbers": NUMBERS, "energy": energy[k],
                           "forces": forces[k], "group": groups[k]})
    store_split(path, grouped)
    loaded = TrainingData.from_hdf5(path)
    assert loaded.split == grouped and read_split(path) == grouped
    assert loaded.groups.tolist() == groups.tolist()
    # a trainer uses the stored split whatever its seed
    trainer = Trainer(small_model(), loaded, seed=5, progress=False)
    assert trainer.split == grouped and len(trainer.test) == len(grouped["test_indices"])


@pytest.mark.slow
def test_resume_reuses_stored_split_and_continues_identically(tmp_path):
    """With EMA, clipping and a weight schedule: 2 epochs + 2 resumed == 4 in one go; the resumed
    trainer (another test share) takes the split from the checkpoint."""
    data = dataset()
    options = dict(batch_size=8, ema_decay=0.9, gradient_clip=50.0, weight_schedule={2: (10.0, 1.0)},
                   test_fraction=0.2, progress=False)
    straight = Trainer(small_model(), data, **options)
    straight.fit(epochs=4)
    checkpoint = tmp_path / "run.chk"
    first = Trainer(small_model(), data, checkpoint=checkpoint, **options)
    first.fit(epochs=2)
    resumed = Trainer(small_model(), data, checkpoint=checkpoint, **dict(options, test_fraction=0.4))
    assert resumed.split != first.split  # before resuming: its own split
    history = resumed.fit(epochs=4)
    assert resumed.split == first.split
    assert history["loss"] == straight.history["loss"]
    assert history["validation_loss"] == straight.history["validation_loss"]
    assert history["energy_weight"] == [1.0, 1.0, 10.0, 10.0]
    for name, value in resumed.model.state_dict().items():
        assert torch.equal(value, straight.model.state_dict()[name]), name
    assert resumed.test_metrics is not None and resumed.test_metrics["n_samples"] == 8
    assert resumed.test_metrics == straight.test_metrics


def test_moving_average_is_what_is_validated_and_saved(tmp_path):
    """The weights saved are the moving average of the optimiser's weights, recomputed here from the
    weights after every step of a run without averaging (the average does not feed back into training)."""
    data = dataset()
    plain = Trainer(small_model(), data, batch_size=8, progress=False, patience=100)
    steps = []
    plain.optimizer.register_step_post_hook(
        lambda *_: steps.append([p.detach().clone() for p in plain.model.parameters()]))
    plain.fit(epochs=2)
    decay = 0.8
    average = [p.detach().clone() for p in small_model().parameters()]
    for n, weights in enumerate(steps, start=1):
        d = min(decay, (1.0 + n) / (10.0 + n))
        average = [d * a + (1 - d) * w for a, w in zip(average, weights, strict=True)]
    checkpoint = tmp_path / "ema.chk"
    averaged = Trainer(small_model(), data, batch_size=8, progress=False, patience=100, ema_decay=decay,
                       checkpoint=checkpoint)
    averaged.fit(epochs=2)
    state = load_checkpoint(checkpoint, kind="mindsponge.train")
    saved = [state["model"]["state_dict"][name] for name, _ in averaged.model.named_parameters()]
    for value, expected in zip(saved, average, strict=True):
        torch.testing.assert_close(value, expected, atol=1e-12, rtol=1e-10)
    for raw_saved, raw in zip(state["extra"]["training_weights"], steps[-1], strict=True):
        torch.testing.assert_close(raw_saved, raw, atol=0, rtol=0)
    assert max(float((a - w).abs().max()) for a, w in zip(saved, steps[-1], strict=True)) > 1e-4


def test_gradient_clipping_bounds_the_step_gradient():
    data = dataset()
    trainer = Trainer(small_model(), data, batch_size=8, progress=False, gradient_clip=0.5)
    norms = []
    trainer.optimizer.register_step_pre_hook(lambda *_: norms.append(float(torch.linalg.vector_norm(
        torch.cat([p.grad.reshape(-1) for p in trainer.model.parameters()])))))
    trainer.fit(epochs=1)
    unclipped = Trainer(small_model(), data, batch_size=8, progress=False)
    raw = []
    unclipped.optimizer.register_step_pre_hook(lambda *_: raw.append(float(torch.linalg.vector_norm(
        torch.cat([p.grad.reshape(-1) for p in unclipped.model.parameters()])))))
    unclipped.fit(epochs=1)
    assert max(raw) > 1.0  # clipping has something to do
    assert max(norms) <= 0.5 * (1 + 1e-6)


def test_weight_schedule_and_float64():
    """A schedule entry at epoch 0 is the same run as those weights given to the constructor; one at
    epoch 1 leaves the first epoch alone and changes the second."""
    data = dataset()
    constant = Trainer(small_model(torch.float32), data, batch_size=8, progress=False, energy_weight=5.0,
                       force_weight=0.5, dtype="float64")
    assert constant.dtype == torch.float64 and next(constant.model.parameters()).dtype == torch.float64
    constant.fit(epochs=2)
    scheduled = Trainer(small_model(), data, batch_size=8, progress=False, weight_schedule={0: (5.0, 0.5)})
    scheduled.fit(epochs=2)
    assert scheduled.history["loss"] == constant.history["loss"]
    later = Trainer(small_model(), data, batch_size=8, progress=False, weight_schedule={1: (5.0, 0.5)})
    later.fit(epochs=2)
    plain = Trainer(small_model(), data, batch_size=8, progress=False)
    plain.fit(epochs=2)
    assert later.history["loss"][0] == plain.history["loss"][0]
    assert later.history["loss"][1] != plain.history["loss"][1]
    with pytest.raises(ValueError, match="weight_schedule"):
        Trainer(small_model(), data, weight_schedule={-1: (1.0, 1.0)})
    with pytest.raises(ValueError, match="ema_decay"):
        Trainer(small_model(), data, ema_decay=1.5)


def test_huber_loss_is_the_closed_form():
    """``loss="huber"``: every squared error e^2 of the MSE loss becomes e^2 below delta and
    delta (2|e| - delta) above (twice the Huber function), per-atom energies and force components."""
    data = dataset(samples=24)
    delta = (0.5, 40.0)
    trainer = Trainer(small_model(), data, loss="huber", huber_delta=delta, progress=False)
    samples = torch.arange(6)
    loss = trainer._loss(samples, 6, int(trainer.training.n_atoms[samples].sum()), (2.0, 3.0))
    with torch.no_grad():
        atoms, batch = trainer.training.atom_indices(samples)
        positions = trainer.training.positions[atoms].clone().requires_grad_(True)
    with torch.enable_grad():
        energies = trainer.model(positions, trainer.training.atomic_numbers[atoms], batch=batch)
        (gradient,) = torch.autograd.grad(energies.sum(), positions)
    energy_error = ((energies - trainer.training.energy[samples]) / 5.0).detach().numpy()
    force_error = (-gradient - trainer.training.forces[atoms]).numpy()

    def huber2(error, threshold):
        size = np.abs(error)
        return np.where(size <= threshold, error ** 2, threshold * (2.0 * size - threshold))

    assert np.abs(force_error).max() > delta[1] > np.abs(force_error).min()  # both branches used
    expected = 2.0 * huber2(energy_error, delta[0]).mean() + 3.0 * huber2(force_error, delta[1]).mean()
    np.testing.assert_allclose(float(loss.detach()), expected, rtol=1e-10)
    with pytest.raises(ConfigurationError, match="loss"):
        Trainer(small_model(), data, loss="l1", progress=False)


def test_warmup_amsgrad_and_cpu_clock(monkeypatch):
    """The learning rate rises as learning_rate * k / warmup_steps over the first steps; AMSGrad is
    Adam's amsgrad; a CPU-time limit counts ``time.process_time`` (a clock that jumps 1000 s per
    optimiser step stops training after the first batch, whatever the wall clock says)."""
    data = dataset(samples=40)
    trainer = Trainer(small_model(), data, batch_size=4, learning_rate=1e-3, warmup_steps=100,
                      amsgrad=True, scheduler_patience=1000, progress=False)
    assert trainer.optimizer.param_groups[0]["amsgrad"]
    rates = []
    original = trainer.optimizer.step
    monkeypatch.setattr(trainer.optimizer, "step",
                        lambda: (rates.append(trainer.optimizer.param_groups[0]["lr"]), original()))
    trainer.fit(epochs=1)
    steps = -(-len(trainer.training) // 4)  # batches of 4
    np.testing.assert_allclose(rates, [1e-3 * k / 100 for k in range(1, steps + 1)], rtol=1e-12)

    trainer = Trainer(small_model(), data, batch_size=4, progress=False)
    monkeypatch.setattr(time, "process_time", lambda: 1000.0 * trainer.loop.extra["steps"])
    trainer.fit(epochs=5, time_limit=10.0, clock="cpu")
    assert trainer.history["step"] == [1]
    with pytest.raises(ConfigurationError, match="clock"):
        trainer.fit(epochs=6, clock="gpu")
