"""common.training: the one History (keys, rows, CSV, the old spellings warn) and the one TrainingLoop
(checkpoint, resume with the stored split and settings, CSV log, TensorBoard, best weights, stop)."""

import csv
import math
import sys

import pytest
import torch

from common import pde
from common.errors import ConfigurationError, DataError
from common.training import History, TrainingLoop, history_path


def test_history_is_a_dict_of_lists_with_rows_and_csv(tmp_path):
    history = History()
    history.append({"step": 1, "loss": 2.0, "learning_rate": 0.1})
    history.append({"monitor_step": 1, "monitor/error": 0.5})
    history.append({"step": 2, "loss": float("nan"), "learning_rate": 0.1})
    history["best_epoch"] = 1
    assert history["step"] == [1, 2] and history["monitor/error"] == [0.5]
    assert history.columns == ["step", "loss", "learning_rate", "monitor_step", "monitor/error"]
    assert history.extras() == {"best_epoch": 1}
    assert History.from_state_dict(history.state_dict()) == history
    rows = list(csv.DictReader(open(history.write_csv(tmp_path / "h.csv"))))
    expected = {"step": "", "loss": "", "learning_rate": "", "monitor_step": "1", "monitor/error": "0.5"}
    assert rows[1] == expected
    assert math.isnan(float(rows[2]["loss"]))


def test_old_history_keys_warn_and_still_read():
    history = History([{"step": 1, "loss": 2.0, "learning_rate": 0.1}])
    with pytest.warns(DeprecationWarning, match=r"history\['lr'\] is deprecated.*history\['learning_rate'\]"):
        assert history["lr"] == [0.1]
    with pytest.warns(DeprecationWarning, match=r"history\['train_loss'\].*history\['loss'\]"):
        assert history["train_loss"] == [2.0]
    with pytest.warns(DeprecationWarning, match=r"history\[index\]"):
        assert history[0] == {"step": 1, "loss": 2.0, "learning_rate": 0.1, "lr": 0.1, "train_loss": 2.0}
    with pytest.raises(KeyError):
        history["nothing"]


def test_pde_trainer_history_lr_warns():
    from common import geometry

    line = geometry.Interval(0.0, 1.0)
    residual = pde.Residual("pde", line, lambda x, u: u[:, 0] - x[:, 0], n_points=8)
    problem = pde.Problem(("x",), ("u",), [residual])
    torch.manual_seed(0)
    trainer = pde.Trainer(problem, torch.nn.Linear(1, 1), steps=3, log_every=1, progress=False)
    history = trainer.fit()
    with pytest.warns(DeprecationWarning, match="learning_rate"):
        assert history["lr"] == history["learning_rate"] and len(history["lr"]) == 3


class _Run:
    """A tiny regression on the shared loop, as a trainer would build it."""

    def __init__(self, checkpoint=None, seed=0, lr=0.05, **options):
        torch.manual_seed(seed)
        self.model = torch.nn.Linear(2, 1)
        self.inputs = torch.rand(20, 2, generator=torch.Generator().manual_seed(1))
        self.targets = self.inputs.sum(1, keepdim=True)
        order = torch.randperm(20, generator=torch.Generator().manual_seed(seed)).tolist()
        optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 0.9**epoch)
        self.loop = TrainingLoop(self.model, optimizer, scheduler, kind="test.run", checkpoint=checkpoint,
                                 progress=False, best=lambda record: record["validation_loss"],
                                 split={"train_indices": order[5:], "validation_indices": order[:5]},
                                 settings={"lr": lr}, **options)

    def epoch(self):
        train = torch.as_tensor(self.loop.split["train_indices"])
        validation = torch.as_tensor(self.loop.split["validation_indices"])
        self.loop.optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(self.model(self.inputs[train]), self.targets[train])
        loss.backward()
        self.loop.optimizer.step()
        learning_rate = self.loop.scheduler.get_last_lr()[0]
        self.loop.scheduler.step()
        with torch.no_grad():
            validation_loss = float(torch.nn.functional.mse_loss(self.model(self.inputs[validation]),
                                                                 self.targets[validation]))
        return {"step": self.loop.done + 1, "epoch": self.loop.done + 1, "loss": float(loss.detach()),
                "learning_rate": learning_rate, "validation_loss": validation_loss}


def test_loop_resumes_bit_for_bit_with_the_stored_split(tmp_path):
    straight = _Run()
    straight.loop.run(8, straight.epoch)
    path = tmp_path / "run.chk"
    first = _Run(checkpoint=path, checkpoint_every=2)
    first.loop.run(4, first.epoch)
    # another seed would draw another split and other weights: the checkpoint's are used
    resumed = _Run(checkpoint=path, seed=7)
    assert resumed.loop.resume_if_present()
    assert resumed.loop.split == straight.loop.split and resumed.loop.done == 4
    history = resumed.loop.run(8, resumed.epoch)
    assert history["loss"] == straight.loop.history["loss"]
    assert history["validation_loss"] == straight.loop.history["validation_loss"]
    assert all(torch.equal(a, b) for a, b in zip(resumed.model.state_dict().values(),
                                                 straight.model.state_dict().values()))
    assert resumed.loop.best_at == straight.loop.best_at
    rows = list(csv.DictReader(open(history_path(path))))
    assert [int(row["epoch"]) for row in rows] == list(range(1, 9))
    with pytest.raises(ConfigurationError, match="written with lr = 0.05, this call has 0.1"):
        _Run(checkpoint=path, lr=0.1).loop.resume_if_present()
    foreign = tmp_path / "foreign.chk"
    from common.io import save_checkpoint

    save_checkpoint(foreign, {"format": "other/1"}, kind="test.run")
    with pytest.raises(DataError, match="not a 'common.training/1' checkpoint"):
        _Run(checkpoint=foreign).loop.resume_if_present()


def test_loop_stop_best_weights_and_csv_log(tmp_path):
    run = _Run(log=tmp_path / "log.csv")
    history = run.loop.run(50, run.epoch, stop=lambda: run.loop.done >= 3)
    assert history["epoch"] == [1, 2, 3]
    assert run.loop.best_score == min(history["validation_loss"])
    rows = list(csv.DictReader(open(tmp_path / "log.csv")))
    assert [float(row["loss"]) for row in rows] == history["loss"]


def test_tensorboard_without_the_package_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if it were not installed
    with pytest.raises(ConfigurationError, match="needs the tensorboard package"):
        _Run(tensorboard=tmp_path / "runs")


def test_tensorboard_log_writes_event_files(tmp_path):
    run = _Run(tensorboard=tmp_path / "runs")
    run.loop.run(2, run.epoch)
    run.loop.close()
    assert list((tmp_path / "runs").glob("events.out.tfevents.*"))
