"""The compiled Yee kernel (mindelec._kernels) against the pure torch update path.

The kernel replaces the bulk ``F = ca F + cb curl`` and the CPML auxiliary fields and corrections of
forward-only CPU steps; everything else (sources, dispersive currents, plane waves, PEC walls) stays in
torch. So a compiled run and a
``compiled=False`` run of the same set-up must agree to round-off in every field component, for every
dimension, polarisation, boundary and kind of coefficient (scalar or per-cell tensor). The physics
validations in test_fdtd_validation.py run with the default ``compiled=True``, so they check the
compiled path against analytic results.
"""

import math
import warnings

import pytest
import torch

import mindelec as me
from common import extensions
from common.geometry import Box, Disk, Interval, Rectangle
from mindelec import _kernels
from mindelec.fdtd.updates import _difference

fdtd = me.fdtd
PULSE = fdtd.GaussianPulse(f0=3e12, fwidth=2e12)
STEPS = 80
# largest difference between the compiled and the torch run, relative to the largest field of its kind
TOLERANCE = {torch.float64: 1e-12, torch.float32: 2e-5}
NO_SLABS = ([], [], [], [], [], [], [], [])  # curl_update's CPML arguments for a grid without PML


@pytest.fixture(scope="module")
def kernel(require_compiled):
    """The compiled Yee kernel (see tests/conftest.py)."""
    return require_compiled(_kernels.yee)


def _drude():
    return fdtd.Drude(plasma_frequency=4e12, collision_frequency=2e11)


def _lorentz():
    return fdtd.Lorentz(delta_permittivity=2.0, resonance_frequency=3e12, damping_frequency=1e11)


# set-ups: (Simulation arguments, the components it carries); sizes in m, cells of 2 um
CASES = {
    "1d-pml-drude": (
        dict(size=(4e-4,), boundary=fdtd.PML(8), sources=[fdtd.PointDipole((-1e-4,), "Ez", PULSE)],
             structures=[fdtd.Structure(Interval(3e-5, 9.1e-5), _drude())]),
        ("Ez", "Hy"),
    ),
    "2d-tm-pml-dielectric-lossy": (
        dict(size=(1.6e-4, 1.2e-4), boundary=fdtd.PML(6),
             sources=[fdtd.PointDipole((-3e-5, 1e-5), "Ez", PULSE)],
             structures=[fdtd.Structure(Disk((2e-5, 0.0), 3.3e-5),
                                        fdtd.Medium(permittivity=4.0, conductivity=2e3, permeability=1.5))]),
        ("Ez", "Hx", "Hy"),
    ),
    "2d-te-periodic-pec-lorentz": (
        dict(size=(1.6e-4, 1.2e-4), boundary=(fdtd.Periodic(), fdtd.PEC()), polarization="TE",
             sources=[fdtd.PointDipole((-3e-5, 1e-5), "Ey", PULSE),
                      fdtd.PointDipole((1e-5, -2e-5), "Hz", PULSE)],
             structures=[fdtd.Structure(Rectangle((1.1e-5, -3.1e-5), (5.3e-5, 2.9e-5)), _lorentz())]),
        ("Ex", "Ey", "Hz"),
    ),
    "2d-te-pml-magnetic-lossy": (
        dict(size=(1.4e-4, 1.2e-4), boundary=fdtd.PML(6), polarization="TE",
             sources=[fdtd.PointDipole((-3e-5, 1e-5), "Hz", PULSE),
                      fdtd.PointDipole((2e-5, -1e-5), "Ex", PULSE)],
             structures=[fdtd.Structure(Disk((1e-5, 2e-5), 2.7e-5),
                                        fdtd.Medium(permittivity=2.5, conductivity=1e3, permeability=2.0))]),
        ("Ex", "Ey", "Hz"),
    ),
    "2d-tm-plane-wave-pec-object": (
        dict(size=(1.6e-4, 1.2e-4), boundary=(fdtd.PML(6), fdtd.Periodic()),
             sources=[fdtd.PlaneWave(PULSE, x0=-5e-5)],
             structures=[fdtd.Structure(Disk((2e-5, 0.0), 2.1e-5), fdtd.PEC())]),
        ("Ez", "Hx", "Hy"),
    ),
    "3d-pml-periodic-pec-dielectric": (
        dict(size=(4e-5, 3.6e-5, 3.2e-5), boundary=(fdtd.PML(4), fdtd.Periodic(), fdtd.PEC()),
             sources=[fdtd.PointDipole((-4e-6, 2e-6, 1e-6), "Ez", PULSE),
                      fdtd.PointDipole((4e-6, -2e-6, 3e-6), "Hx", PULSE)],
             structures=[fdtd.Structure(Box((1e-6, -9e-6, -7e-6), (1.3e-5, 9e-6, 9e-6)),
                                        fdtd.Medium(permittivity=3.0, conductivity=1e3))]),
        ("Ex", "Ey", "Ez", "Hx", "Hy", "Hz"),
    ),
    "3d-pml-all-sides-lossy": (
        dict(size=(4e-5, 3.6e-5, 3.2e-5), boundary=fdtd.PML(4),
             sources=[fdtd.PointDipole((-4e-6, 2e-6, 1e-6), "Ey", PULSE),
                      fdtd.PointDipole((4e-6, -2e-6, 3e-6), "Hz", PULSE)],
             structures=[fdtd.Structure(Box((-9e-6, -9e-6, -7e-6), (1.1e-5, 9e-6, 9e-6)),
                                        fdtd.Medium(permittivity=2.0, conductivity=2e3, permeability=1.5))]),
        ("Ex", "Ey", "Ez", "Hx", "Hy", "Hz"),
    ),
    "3d-periodic-drude": (
        dict(size=(3.2e-5, 3.6e-5, 4e-5), boundary=fdtd.Periodic(),
             sources=[fdtd.PointDipole((1e-6, -3e-6, 2e-6), "Ey", PULSE)],
             structures=[fdtd.Structure(Box((-1e-5, -1e-5, -1e-5), (5e-6, 7e-6, 9e-6)), _drude())]),
        ("Ex", "Ey", "Ez", "Hx", "Hy", "Hz"),
    ),
}


def _final_fields(arguments, components, dtype, compiled):
    """Every field component after ``STEPS`` forward-only steps: ``{component: tensor}``."""
    sim = fdtd.Simulation(cell_size=2e-6, dtype=dtype, compiled=compiled,
                          monitors=[fdtd.Snapshots("final", STEPS, components)], **arguments)
    with torch.no_grad():
        result = sim.run(steps=STEPS, progress=False)
    return {component: result["final"][component][-1] for component in components}


def _relative_differences(first, second):
    """Per component, max |first - second| over the largest |second| among the components of its kind."""
    scale = {kind: max(float(second[c].abs().max()) for c in second if c[0] == kind) for kind in "EH"}
    return {c: float((first[c] - second[c]).abs().max()) / scale[c[0]] for c in second}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("case", list(CASES))
def test_compiled_equals_pure_torch(kernel, case, dtype, monkeypatch):
    arguments, components = CASES[case]
    calls = {"curl_update": [], "slabs": []}

    class Counting:
        def curl_update(self, *arguments):
            calls["curl_update"].append(1)
            calls["slabs"].append(len(arguments[10]))
            return kernel.curl_update(*arguments)

    monkeypatch.setattr(_kernels, "yee", Counting)
    compiled = _final_fields(arguments, components, dtype, compiled=True)
    # the compiled path updated H and E on every step, with all the PML slabs (none without PML)
    assert len(calls["curl_update"]) == 2 * STEPS
    boundary = arguments["boundary"]
    has_pml = any(isinstance(b, fdtd.PML) for b in (boundary if isinstance(boundary, tuple) else (boundary,)))
    assert (sum(calls["slabs"]) > 0) == has_pml
    reference = _final_fields(arguments, components, dtype, compiled=False)
    assert len(calls["curl_update"]) == 2 * STEPS  # and the torch run did not use it
    for component in components:
        assert reference[component].abs().max() > 0, component
    differences = _relative_differences(compiled, reference)
    assert max(differences.values()) < TOLERANCE[dtype], differences


def _reference_update(field, ca, cb, sources, axes, scales, periodic, forward):
    """``ca * field + cb * sum_t scale_t D_t(source_t)`` with the torch path's differences."""
    curl = sum(scale * _difference(source, axis, forward, periodic[axis])
               for source, axis, scale in zip(sources, axes, scales))
    return ca * field + cb * curl


@pytest.mark.parametrize("periodic", [(False, False, False), (True, True, True), (False, True, False)])
@pytest.mark.parametrize("forward", [True, False], ids=["forward", "backward"])
def test_kernel_matches_differences_on_every_axis(kernel, periodic, forward):
    """Random arrays, differences along all three axes, tensor ca and scalar cb (and the reverse)."""
    generator = torch.Generator().manual_seed(3)
    shape = (5, 7, 9)
    fields = [torch.randn(shape, dtype=torch.float64, generator=generator) for _ in range(2)]
    sources = [torch.randn(shape, dtype=torch.float64, generator=generator) for _ in range(3)]
    ca = torch.rand(shape, dtype=torch.float64, generator=generator)
    cb = torch.rand(shape, dtype=torch.float64, generator=generator)
    terms = [([sources[0], sources[1], sources[2]], [0, 1, 2], [0.5, -2.0, 3.0]), ([sources[2]], [0], [-1.5])]
    expected = [_reference_update(fields[0], ca, 0.7, *terms[0], periodic, forward),
                _reference_update(fields[1], 0.9, cb, *terms[1], periodic, forward)]
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # rows split between threads must give the same result
        kernel.curl_update(fields, [ca, None], [0.0, 0.9], [None, cb], [0.7, 0.0],
                           [terms[0][0], terms[1][0]], [terms[0][1], terms[1][1]], [terms[0][2], terms[1][2]],
                           list(periodic), forward, *NO_SLABS)
    finally:
        torch.set_num_threads(threads)
    for field, reference in zip(fields, expected):
        assert float((field - reference).abs().max()) < 1e-13 * float(reference.abs().max())


def _reference_cpml_update(fields, coefficients, terms, slabs, periodic, forward):
    """The fields and psi after the kernel's update with CPML slabs, written in torch (the argument layout of
    :func:`test_cpml_slabs_in_the_kernel_match_torch_on_every_axis_and_side`)."""
    expected_fields, expected_psi = [], [slab[3].clone() for slab in slabs]
    for field_index, field in enumerate(fields):
        curl = torch.zeros(field.shape, dtype=torch.float64)
        for term_index, (source, axis, scale) in enumerate(terms[field_index]):
            difference = _difference(source, axis, forward, periodic)
            curl += scale * difference
            for slab, psi in zip(slabs, expected_psi):
                if slab[:2] == (field_index, term_index):
                    start, thickness, sign = slab[2], len(slab[4]), slab[7]
                    along = [1, 1, 1]
                    along[axis] = thickness
                    b, a, kappa = (profile.reshape(along) for profile in slab[4:7])
                    part = difference.narrow(axis, start, thickness)
                    psi.copy_(b * psi + a * part)
                    curl.narrow(axis, start, thickness).add_(sign * (psi + kappa * part))
        ca_value, ca_scalar, cb_value, cb_scalar = coefficients[field_index]
        expected_fields.append((ca_scalar if ca_value is None else ca_value) * field
                               + (cb_scalar if cb_value is None else cb_value) * curl)
    return expected_fields, expected_psi


@pytest.mark.parametrize("periodic", [False, True], ids=["pec", "periodic"])
@pytest.mark.parametrize("forward", [True, False], ids=["forward", "backward"])
def test_cpml_slabs_in_the_kernel_match_torch_on_every_axis_and_side(kernel, periodic, forward):
    """Random slabs on both sides of all three axes of two fields (their corners overlap, and along the
    first axis, 6 cells for slabs of 4, the two sides overlap too), tensor and scalar coefficients: psi and
    the fields against the update with the CPML corrections written in torch."""
    generator = torch.Generator().manual_seed(5)
    shape, thickness = (6, 7, 9), 4

    def random(*size):
        return torch.randn(size, dtype=torch.float64, generator=generator)

    fields, sources = [random(*shape) for _ in range(2)], [random(*shape) for _ in range(3)]
    ca, cb = random(*shape), random(*shape)
    coefficients = [(ca, 0.0, None, 0.8), (None, 0.9, cb, 0.0)]  # (ca, ca_scalar, cb, cb_scalar) per field
    terms = [[(sources[0], 0, 2.0), (sources[1], 1, -1.5), (sources[2], 2, 0.5)],
             [(sources[2], 2, -1.0), (sources[0], 1, 3.0)]]  # (source, axis, scale) per term
    slabs = []  # (field, term, start, psi, b, a, kappa, sign)
    for field_index, field_terms in enumerate(terms):
        for term_index, (_, axis, scale) in enumerate(field_terms):
            psi_shape = list(shape)
            psi_shape[axis] = thickness
            for start in (0, shape[axis] - thickness):
                slabs.append((field_index, term_index, start, random(*psi_shape),
                              *(random(thickness) for _ in range(3)), math.copysign(1.0, scale)))
    expected_fields, expected_psi = _reference_cpml_update(
        fields, coefficients, terms, slabs, periodic, forward)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # rows split between threads must give the same result
        kernel.curl_update(
            fields, [c[0] for c in coefficients], [c[1] for c in coefficients], [c[2] for c in coefficients],
            [c[3] for c in coefficients], [[t[0] for t in field_terms] for field_terms in terms],
            [[t[1] for t in field_terms] for field_terms in terms],
            [[t[2] for t in field_terms] for field_terms in terms], [periodic] * 3, forward,
            *([slab[k] for slab in slabs] for k in (0, 1, 3, 4, 5, 6, 2, 7)),
        )
    finally:
        torch.set_num_threads(threads)
    for slab, reference in zip(slabs, expected_psi):
        assert float((slab[3] - reference).abs().max()) < 1e-13 * float(reference.abs().max())
    for field, reference in zip(fields, expected_fields):
        assert float((field - reference).abs().max()) < 1e-13 * float(reference.abs().max())


def test_cpml_slab_of_the_wrong_shape_is_refused(kernel):
    field, profile = torch.zeros(4, 5, 6), torch.zeros(2)
    curl = ([field], [None], [1.0], [None], [1.0], [[field.clone()]], [[0]], [[1.0]], [False] * 3, True)
    with pytest.raises(RuntimeError, match="psi has shape"):
        kernel.curl_update(*curl, [0], [0], [torch.zeros(2, 5, 5)], [profile], [profile], [profile], [0],
                           [1.0])
    with pytest.raises(RuntimeError, match="one value per slab layer"):
        kernel.curl_update(*curl, [0], [0], [torch.zeros(2, 5, 6)], [profile], [torch.zeros(3)], [profile],
                           [2], [1.0])
    with pytest.raises(RuntimeError, match="names field 0 term 1, which does not exist"):
        kernel.curl_update(*curl, [0], [1], [torch.zeros(2, 5, 6)], [profile], [profile], [profile], [0],
                           [1.0])


def test_kernel_rejects_mismatched_arrays(kernel):
    field = torch.zeros(4, 5, 6)
    with pytest.raises(RuntimeError, match="ca has dtype"):
        kernel.curl_update([field], [torch.zeros(4, 5, 6, dtype=torch.float64)], [0.0], [None], [1.0],
                           [[field.clone()]], [[2]], [[1.0]], [False] * 3, True, *NO_SLABS)
    with pytest.raises(RuntimeError, match="a source must be contiguous"):
        kernel.curl_update([field], [None], [1.0], [None], [1.0], [[torch.zeros(6, 5, 4).transpose(0, 2)]],
                           [[2]], [[1.0]], [False] * 3, True, *NO_SLABS)


def test_disabled_extensions_fall_back_to_torch(monkeypatch):
    """With MINDSCIENCE_NO_EXTENSIONS=1 a compiled=True run warns once and equals the compiled=False run."""
    arguments, components = CASES["2d-tm-pml-dielectric-lossy"]
    expected = _final_fields(arguments, components, torch.float32, compiled=False)
    monkeypatch.setenv("MINDSCIENCE_NO_EXTENSIONS", "1")
    monkeypatch.setattr(extensions, "_warned", set())
    match = "mindelec_yee.*MINDSCIENCE_NO_EXTENSIONS=1"
    with pytest.warns(extensions.ExtensionWarning, match=match) as record:
        fallback = _final_fields(arguments, components, torch.float32, compiled=True)
    assert len(record) == 1
    assert _kernels.yee() is None
    for component in components:
        assert torch.equal(fallback[component], expected[component]), component


def test_checkpointed_gradient_unchanged_by_the_kernel():
    """The differentiable path's forward segments may use the kernel; the gradient must not change."""
    size, center, extent = (6e-5, 5e-5), (6e-6, 0.0), (1.1e-5, 0.9e-5)
    shape = fdtd.Grid(size, 2e-6).cell_counts(center, extent)
    permittivity = torch.linspace(1.5, 3.0, shape[0] * shape[1], dtype=torch.float64).reshape(shape)
    permittivity.requires_grad_(True)
    gradients = []
    for compiled in (True, False):
        sim = fdtd.Simulation(size=size, cell_size=2e-6, boundary=fdtd.PML(6), dtype=torch.float64,
                              compiled=compiled, sources=[fdtd.PointDipole((-1e-5, 0.0), "Ez", PULSE)],
                              design_regions=[fdtd.DesignRegion(center, extent, permittivity)],
                              monitors=[fdtd.FieldProbe("probe", (1.6e-5, 6e-6), ("Ez",))])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", extensions.ExtensionWarning)
            energy = sim.run(steps=STEPS, progress=False)["probe"]["Ez"].square().sum()
        gradients.append(torch.autograd.grad(energy, permittivity)[0])
    scale = float(gradients[1].abs().max())
    assert scale > 0
    assert float((gradients[0] - gradients[1]).abs().max()) < 1e-10 * scale


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
def test_blow_up_is_reported_with_its_step(compiled):
    """A Lorentz pole far above 2 / dt makes its update unstable: the run must stop, naming the step."""
    resonance = 1e17  # omega0 dt ~ 2e3, far beyond the ADE's stability limit of 2
    sim = fdtd.Simulation(size=(4e-4,), cell_size=2e-6, compiled=compiled,
                          sources=[fdtd.PointDipole((0.0,), "Ez", PULSE)],
                          structures=[fdtd.Structure(Interval(-5e-5, 5e-5),
                                                     fdtd.Lorentz(1.0, resonance_frequency=resonance))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", extensions.ExtensionWarning)
        with pytest.raises(FloatingPointError, match="non-finite by step 256"):
            sim.run(steps=300, progress=False)
