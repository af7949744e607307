"""mindelec.sweeps: the dataset-generator contract of sparameter_sample, and its S-parameters against the
analytic Fabry-Perot response of a dielectric block filling a parallel-plate waveguide (TM1 mode, with the
Yee grid's discrete wavenumbers: sweeps.block_s_parameters), and against the continuum formula."""

import numpy as np
import pytest

from mindelec import sweeps


def test_sample_contract_and_analytic_block():
    params = {"length": 15e-3, "permittivity": 3.0}  # faces on half nodes: no partially filled cells
    sample = sweeps.sparameter_sample(params, seed=0)
    assert tuple(sorted(sample)) == tuple(sorted(sweeps.SAMPLE_KEYS))
    setup = sweeps.WaveguideSetup()
    frequencies = sample["frequencies"]
    np.testing.assert_allclose(frequencies, setup.frequencies.numpy())
    for key, value in sample.items():
        assert (
            isinstance(value, np.ndarray) and value.shape == frequencies.shape and value.dtype == np.float64
        ), key
    s11 = sample["s11_real"] + 1j * sample["s11_imag"]
    s21 = sample["s21_real"] + 1j * sample["s21_imag"]
    np.testing.assert_allclose(sample["s11_db"], 20 * np.log10(np.abs(s11)))
    expected_s11, expected_s21 = sweeps.block_s_parameters(frequencies, **params, setup=setup)
    # a lossless closed guide: |S11|^2 + |S21|^2 = 1 (measured 4e-4)
    assert np.abs(np.abs(s11) ** 2 + np.abs(s21) ** 2 - 1).max() < 2e-3
    # the band spans a reflection zero and a maximum (|S11| 0.03 .. 0.73)
    assert np.abs(expected_s11).min() < 0.1 and np.abs(expected_s11).max() > 0.6
    # complex S11, S21 against the discrete-dispersion formula (measured 0.010, 0.007)
    assert np.abs(s11 - expected_s11).max() < 0.02
    assert np.abs(s21 - expected_s21).max() < 0.02
    # the continuum formula differs by the grid's dispersion (measured 0.036 in |S11|; 1 mm cells)
    continuum_s11, _ = sweeps.block_s_parameters(frequencies, **params, setup=setup, discrete=False)
    assert np.abs(np.abs(s11) - np.abs(continuum_s11)).max() < 0.05
    # another sample: same keys, same frequency axis
    other = sweeps.sparameter_sample({"length": 9e-3, "permittivity": 2.0, "width": 20e-3}, seed=1)
    assert sorted(other) == sorted(sample)
    np.testing.assert_array_equal(other["frequencies"], frequencies)
    assert np.abs(other["s11_db"] - sample["s11_db"]).max() > 1.0


def test_s_matrix_is_symmetric_and_reciprocal():
    sample = {
        "s11_real": np.array([0.1]),
        "s11_imag": np.array([0.2]),
        "s21_real": np.array([0.3]),
        "s21_imag": np.array([-0.4]),
    }
    matrix = sweeps.s_matrix_from_sample(sample)
    np.testing.assert_allclose(matrix[0], [[0.1 + 0.2j, 0.3 - 0.4j], [0.3 - 0.4j, 0.1 + 0.2j]])


def test_bad_parameters_and_options():
    with pytest.raises(KeyError, match="missing keys \\['permittivity'\\]"):
        sweeps.sparameter_sample({"length": 1e-2}, seed=0)
    with pytest.raises(KeyError, match="unknown keys \\['radius'\\]"):
        sweeps.sparameter_sample({"length": 1e-2, "permittivity": 2.0, "radius": 1.0}, seed=0)
    with pytest.raises(ValueError, match="params\\['permittivity'\\]"):
        sweeps.sparameter_sample({"length": 1e-2, "permittivity": -2.0}, seed=0)
    with pytest.raises(ValueError, match="params\\['length'\\]"):
        sweeps.sparameter_sample({"length": 0.5, "permittivity": 2.0}, seed=0)
    with pytest.raises(ValueError, match="single-mode range"):
        sweeps.sparameter_sample({"length": 1e-2, "permittivity": 2.0}, seed=0, f_max=20e9)
    with pytest.raises(TypeError, match="WaveguideSetup"):
        sweeps.sparameter_sample({"length": 1e-2, "permittivity": 2.0}, seed=0, colour="red")
    with pytest.raises(ValueError, match="options\\['dtype'\\]"):
        sweeps.sparameter_sample({"length": 1e-2, "permittivity": 2.0}, seed=0, dtype="float16")


def test_field_sample_shapes():
    sample = sweeps.field_sample({"length": 15e-3, "permittivity": 3.0}, seed=0, n_frequencies=2)
    shape = sample["permittivity"].shape
    assert shape == (200, 20) and sample["field_real"].shape == shape == sample["field_imag"].shape
    # the block's cells hold its permittivity, the rest vacuum
    assert sample["permittivity"].max() == pytest.approx(3.0) and sample[
        "permittivity"
    ].min() == pytest.approx(1.0)
    assert (
        np.isfinite(sample["field_real"]).all()
        and np.abs(sample["field_real"] + 1j * sample["field_imag"]).max() > 0.5
    )


def test_waveguide_setup_takes_cell_size_and_the_old_resolution_warns():
    setup = sweeps.WaveguideSetup(cell_size=2e-3, pml=10, port_offset=45e-3, guide_length=160e-3)
    with pytest.warns(DeprecationWarning, match="cell_size"):
        old = sweeps.WaveguideSetup(resolution=2e-3, pml=10, port_offset=45e-3, guide_length=160e-3)
    assert old.key() == setup.key()
    with pytest.warns(DeprecationWarning, match="cell_size"):
        assert setup.resolution == setup.cell_size == 2e-3
    assert setup.simulation().grid.shape[:2] == (80, 10)
