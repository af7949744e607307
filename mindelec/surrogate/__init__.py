"""Data-driven electromagnetics: S-parameter and field surrogates, and an autoencoder for field data.

* :class:`SParameterSurrogate`: geometry parameters ``(B, P)`` -> complex S-parameters ``(B, F, K)`` over a
  fixed frequency axis (an MLP on normalised inputs and outputs), trained by
  :func:`train_sparameter_surrogate` on a sweep stored in HDF5 by ``common.datasets`` /
  ``common.io.H5Writer`` (columnar: ``sample_id``, one column per parameter, ``frequencies`` (N, F),
  ``s11_real``, ``s11_imag``, ``s21_real``, ``s21_imag`` (N, F): the keys of
  :func:`mindelec.sweeps.sparameter_sample`).
* :class:`FieldSurrogate`: a permittivity map ``(B, H, W)`` -> the complex frequency-domain field map
  ``(B, H, W)`` (a small convolutional encoder-decoder with coordinate channels), trained on FDTD DFT
  fields (:func:`mindelec.sweeps.field_sample`).
* :class:`ConvAutoencoder`: compresses grids ``(B, C, H, W)`` (field snapshots, geometry tensors) to a
  latent grid ``(B, latent_channels, H / 2^levels, W / 2^levels)``; :attr:`ConvAutoencoder.compression_ratio`
  and :func:`relative_error` report what it achieves.
* :func:`fit`: the training of all three, on the shared :class:`common.training.TrainingLoop`: Adam
  with a cosine schedule, a seeded train/validation split stored with the run, the best-validation
  weights kept, atomic checkpoints from which a killed run resumes bit for bit, a
  :class:`common.training.History`, and data-parallel training under ``torchrun`` through
  ``common.parallel.DistributedContext``.
* :mod:`~mindelec.surrogate.antenna`: the 3D antenna workflow: a stored held-out and extrapolation
  design split, resumable ensembles (:func:`train_ensemble`, :class:`Ensemble`), held-out scores that refuse
  training designs (:func:`evaluate`), :func:`inverse_design`, and :func:`voxel_autoencoder`.
* :func:`export_touchstone` and :func:`plot_comparison`: predicted and simulated S-parameters as
  Touchstone files (scikit-rf, via :mod:`mindelec.ports`) and a comparison plot.

Example::

    model, history = train_sparameter_surrogate("sweep.h5", ["length", "permittivity"], epochs=2000)
    s = model.predict(torch.tensor([[12e-3, 3.0]]))        # (1, F, 2) complex: S11, S21
    model.save("surrogate.pt"); SParameterSurrogate.load("surrogate.pt")


The package: :mod:`~mindelec.surrogate.training` (``fit`` and the error measures),
:mod:`~mindelec.surrogate.sparameters`, :mod:`~mindelec.surrogate.fields` (field surrogate and
autoencoder) and :mod:`~mindelec.surrogate.export` (Touchstone files and plots).
"""

from common.training import CHECKPOINT_FORMAT
from mindelec.surrogate.antenna import Ensemble, evaluate, inverse_design, train_ensemble, voxel_autoencoder
from mindelec.surrogate.export import export_touchstone, plot_comparison
from mindelec.surrogate.fields import ConvAutoencoder, FieldSurrogate, load_field_dataset
from mindelec.surrogate.sparameters import SParameterSurrogate, load_sweep, train_sparameter_surrogate
from mindelec.surrogate.training import db, fit, relative_error

__all__ = [
    "fit",
    "CHECKPOINT_FORMAT",
    "relative_error",
    "SParameterSurrogate",
    "load_sweep",
    "train_sparameter_surrogate",
    "FieldSurrogate",
    "load_field_dataset",
    "ConvAutoencoder",
    "export_touchstone",
    "plot_comparison",
    "db",
    "Ensemble",
    "train_ensemble",
    "evaluate",
    "inverse_design",
    "voxel_autoencoder",
]
