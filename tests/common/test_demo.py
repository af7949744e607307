"""The core demo (``make demo``) runs and its autodiff derivatives match the closed forms."""

from common import demo


def test_core_demo_matches_closed_forms(tmp_path):
    results = demo.run(tmp_path, n_interior=512, n_boundary=128)
    assert results["laplacian_max_abs_error"] < 1e-10
    assert results["normal_derivative_max_abs_error"] < 1e-12
    assert (tmp_path / "core_demo.png").stat().st_size > 10_000
    assert (tmp_path / "core_demo.csv").read_text().startswith("quantity,value")
