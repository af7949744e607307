"""MACE (Batatia et al., NeurIPS 2022) from the ``mace-torch`` package as a mindsponge learned potential.

:class:`MACE` holds a mace-torch model (built here from hyperparameters, or a trained one loaded
from a trusted ``.model`` file or passed in) and evaluates it on mindsponge's pairs: mindsponge finds the
atom pairs within the cutoff (all pairs of a molecule, or the neighbour list with the minimum
image in a box) and hands mace-torch the displacement vectors (in Angstrom) as its edge
``shifts`` with all positions at the origin, so that mace-torch's edge vectors
``positions[receiver] - positions[sender] + shifts`` are exactly mindsponge's, differentiable in
the positions. mace-torch's per-atom energies (eV, with its own ``E0`` references) become
kJ/mol through ``energy_scale`` (1 eV = 96.485 kJ/mol for a loaded model; refitted by
:meth:`~mindsponge.potentials.LearnedPotential.fit_statistics` when trained from scratch with
:class:`mindsponge.training.Trainer`). Forces are ``-dE/dx`` by autograd, as for the other
potentials, so a :class:`MACE` runs in :class:`~mindsponge.simulation.Simulation`,
:class:`~mindsponge.potentials.SumPotential` and the ASE calculator through :meth:`bind`.
"""

from __future__ import annotations

import os

import ase.units
import numpy as np
import torch
from torch import Tensor

from common import checks
from common.errors import ArgumentTypeError, ConfigurationError, MissingFileError
from mindsponge.potentials.base import DEFAULT_ELEMENTS, LearnedPotential

__all__ = ["MACE", "EV_IN_KJ_PER_MOL"]

#: 1 eV in kJ/mol (ASE's constants, as mace-torch's ASE calculator)
EV_IN_KJ_PER_MOL = 1.0 / (ase.units.kJ / ase.units.mol)
_ANGSTROM_PER_NM = 10.0


_NO_WEIGHTS_ONLY = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"


def _import_mace():
    # importing mace-torch sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1, which makes every later torch.load
    # that does not pass weights_only load full pickles, in this process and its children: undone here
    previous = os.environ.get(_NO_WEIGHTS_ONLY)
    try:
        # e3nn 0.4 (mace-torch's pin) loads its constant tables, which hold slices, with torch.load's
        # default, which is weights_only=True since torch 2.6
        with torch.serialization.safe_globals([slice]):
            from e3nn import o3
            from mace import modules
    except ImportError as error:
        raise ImportError(f"ms.potentials.MACE needs the mace-torch package ({error}); pip install "
                          f"mace-torch (it is in the dev extra and keeps the installed torch)") from error
    finally:
        if previous is None:
            os.environ.pop(_NO_WEIGHTS_ONLY, None)
        else:
            os.environ[_NO_WEIGHTS_ONLY] = previous
    return modules, o3


def build_mace_model(cutoff: float, features: int, interactions: int, max_l: int, correlation: int,
                     n_basis: int, hidden_l: int, neighbours: float, elements) -> torch.nn.Module:
    """A mace-torch ``MACE`` (radial cutoff ``cutoff`` nm, ``features`` channels of hidden irreps up
    to degree ``hidden_l``, spherical harmonics up to ``max_l``, ``correlation`` order, ``n_basis``
    Bessel functions, zero ``E0`` references) with the standard residual interaction blocks."""
    modules, o3 = _import_mace()
    hidden = "+".join(f"{features}x{degree}{'eo'[degree % 2]}" for degree in range(hidden_l + 1))
    blocks = modules.interaction_classes
    return modules.MACE(
        r_max=cutoff * _ANGSTROM_PER_NM, num_bessel=n_basis, num_polynomial_cutoff=6, max_ell=max_l,
        interaction_cls=blocks["RealAgnosticResidualInteractionBlock"],
        interaction_cls_first=blocks["RealAgnosticResidualInteractionBlock"],
        num_interactions=interactions, num_elements=len(elements), hidden_irreps=o3.Irreps(hidden),
        MLP_irreps=o3.Irreps("16x0e"), atomic_energies=np.zeros(len(elements)), avg_num_neighbors=neighbours,
        atomic_numbers=list(elements), correlation=correlation, gate=torch.nn.functional.silu,
        radial_MLP=[64, 64, 64])


class MACE(LearnedPotential):
    """A mace-torch MACE model as a learned potential (see the module docstring).

    Args:
        cutoff: nm (default 0.5).
        features: channels of the hidden features.
        interactions: message-passing layers.
        max_l: highest degree of the spherical harmonics of the edges.
        correlation: body order minus one of the symmetric products.
        n_basis: Bessel radial basis functions.
        hidden_l: highest degree of the hidden features (0: scalars only, MACE's "L=0" model).
        neighbours: average neighbour count the messages are divided by.
        elements: atomic numbers the model embeds.
        skin: neighbour-list skin for periodic or large systems, nm.
        dtype: ``"float32"`` or ``"float64"``: e3nn builds some constants in the default dtype
            that ``.double()`` does not convert, so a float64 model is built in float64.

    Use :meth:`from_file` (``trust=True``: a ``.model`` file is a pickle) or :meth:`from_model` for a
    trained mace-torch model.

    Call: ``model(positions (N, 3) nm, atomic_numbers (N,), box=None, batch=None) -> energy``
    (kJ/mol; ``()`` or ``(M,)`` with ``batch``).
    """

    vectorisable = False  # mace-torch calls requires_grad_ inside its forward, which torch.func.vmap refuses

    def __init__(self, cutoff: float = 0.5, features: int = 64, interactions: int = 2, max_l: int = 2,
                 correlation: int = 3, n_basis: int = 8, hidden_l: int = 0, neighbours: float = 10.0,
                 elements=DEFAULT_ELEMENTS, skin: float = 0.1, dtype: str = "float32", *,
                 _model: torch.nn.Module | None = None):
        super().__init__(cutoff, elements, skin)
        if _model is None:
            if dtype not in ("float32", "float64"):
                raise ConfigurationError(f"MACE: dtype must be 'float32' or 'float64', got {dtype!r}")
            checks.non_negative_int(hidden_l, "MACE: hidden_l")
            checks.positive(neighbours, "MACE: neighbours")
            self._record_hyperparameters(
                dict(features=features, interactions=interactions, max_l=max_l, correlation=correlation,
                     n_basis=n_basis), hidden_l=hidden_l, neighbours=neighbours, dtype=dtype)
            previous = torch.get_default_dtype()
            torch.set_default_dtype(getattr(torch, dtype))  # e3nn builds constants in the default dtype
            try:
                _model = build_mace_model(cutoff, features, interactions, max_l, correlation, n_basis,
                                          hidden_l, neighbours, self.elements)
            finally:
                torch.set_default_dtype(previous)
        else:
            self.hyperparameters = None  # a given mace-torch module: saved with torch.save(model.mace_model)
        self.mace_model = _model
        self.energy_scale.fill_(EV_IN_KJ_PER_MOL)
        self.to(next(_model.parameters()).dtype)

    @classmethod
    def from_model(cls, model: torch.nn.Module, skin: float = 0.1) -> MACE:
        """Wrap a mace-torch model (its cutoff ``r_max`` in Angstrom and elements ``atomic_numbers``
        are read from it); energies in eV and lengths in Angstrom, as mace-torch's own models."""
        if not (hasattr(model, "r_max") and hasattr(model, "atomic_numbers")):
            raise ArgumentTypeError(
                f"model must be a mace-torch MACE model (with r_max and atomic_numbers), got "
                            f"{type(model).__name__}")
        numbers = [int(z) for z in model.atomic_numbers]
        if numbers != sorted(set(numbers)):
            raise ConfigurationError(
                f"the mace-torch model's atomic_numbers {numbers} are not sorted and distinct")
        cutoff = float(model.r_max) / _ANGSTROM_PER_NM
        return cls(cutoff, elements=numbers, skin=skin, _model=model)

    @classmethod
    def from_file(cls, path: str | os.PathLike, skin: float = 0.1, *, trust: bool = False) -> MACE:
        """Wrap a trained mace-torch model saved with ``torch.save`` (a ``.model`` file).

        A ``.model`` file is a Python pickle of the whole mace-torch module, not a table of weights:
        loading it imports and calls whatever the file names, so a crafted file runs code of its
        author's choosing (``torch.load(weights_only=False)``, as mace-torch's own calculator). It
        is therefore loaded only with ``trust=True``, which says that the file comes from a trusted
        source (you trained it, or its authors published it where you got it). A model built from
        hyperparameters and saved with :func:`mindsponge.potentials.save` loads safely with
        :func:`mindsponge.potentials.load` instead.

        Args:
            path: the ``.model`` file.
            skin: neighbour-list skin, nm.
            trust: load the pickle (required; ``False`` refuses the file).

        Raises:
            FileNotFoundError: no such file.
            common.errors.ConfigurationError: ``trust`` is not ``True`` (the file is not opened).
        """
        _import_mace()
        if not os.path.isfile(path):
            raise MissingFileError(f"MACE model file {str(path)!r} does not exist")
        if trust is not True:
            raise ConfigurationError(
                f"MACE.from_file: {str(path)!r} was not loaded: a mace-torch .model file is a Python pickle, "
                f"and loading it can run any code the file holds. Pass trust=True only for a file from a "
                f"trusted source (one you trained, or one from its authors)")
        return cls.from_model(torch.load(path, map_location="cpu", weights_only=False), skin=skin)

    def atomic_outputs(self, species: Tensor, pairs: Tensor, vectors: Tensor) -> Tensor:
        """mace-torch's per-atom energies (eV for a loaded model) on mindsponge's pairs and vectors."""
        n_atoms = len(species)
        dtype = vectors.dtype
        data = {
            "positions": torch.zeros((n_atoms, 3), dtype=dtype, device=vectors.device),
            "node_attrs": torch.nn.functional.one_hot(species, self.n_elements).to(dtype),
            "edge_index": pairs.T.contiguous(),
            "shifts": vectors * _ANGSTROM_PER_NM,
            "batch": torch.zeros(n_atoms, dtype=torch.long, device=vectors.device),
            "ptr": torch.tensor([0, n_atoms], device=vectors.device),
            "cell": torch.zeros((3, 3), dtype=dtype, device=vectors.device),
        }
        # e3nn and mace-torch make some constants in torch's default dtype when first called
        previous = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            output = self.mace_model(data, training=self.training, compute_force=False)
        finally:
            torch.set_default_dtype(previous)
        return output["node_energy"]
