"""A planar inverted-F antenna (mindelec.pifa) against a published, measured PIFA and an openEMS model of it.

Reference: M.-C. T. Huynh, M.S. thesis, Virginia Tech 2000 (VTechWorks 10919/35477), Table 5-1: an air PIFA,
a 20 x 20 mm plate 10 mm over a square ground of side L, a 5 mm short at the plate's side edge, the probe
px from the short matched to 50 ohm; measured resonance 1892 MHz at L = 80 mm (IE3D 1943 MHz), 2440 MHz at
L = 20 mm (IE3D 2343 MHz). Read through the transcription in king-aj3/EMStudioFree (the thesis itself was
not readable here), whose openEMS model of the same antenna (the feed 5 mm from the short, the plate's
shorted edge over the ground's centre) gives 1.9149 / 1.9037 / 1.8962 / 1.8849 GHz at its mesh resolutions
20 / 40 / 60 / 90. benchmarks/pifa_published.py runs the convergence study this coarse test stands on.
"""

import dataclasses

import pytest

from common.errors import ConfigurationError
from common.units import SPEED_OF_LIGHT
from mindelec import pifa

COARSE = 2.5e-3  # m: 2 cells across the short, 4 up the height, 8 across the plate


def _resonance(design):
    model = pifa.pifa_simulation(design, cell=COARSE)
    return pifa.resonance(model.simulation.run(until=40e-9, until_decayed=1e-5, progress=False))


@pytest.mark.slow
def test_pifa_against_the_measured_resonance_and_openems(validation_figure):
    """Three runs on 2.5 mm cells (about 10 s). Measured on 2026-12-04: 1.7768 GHz on the 80 mm ground
    (-6.1 % from the measured 1892 MHz), +18.1 % on the 20 mm ground, 1.8719 GHz on the openEMS model's
    geometry (-0.7 % from its finest mesh).

    Tolerances, from what this grid and the reference support:

    * the measured resonance within 8 %: the 2.5 mm grid is 0.4 % below the finer grids, which agree
      within 0.05 % (1.7838-1.7846 GHz on 1.25-0.625 mm cells, benchmarks/pifa_published.py); the thesis's
      own computed (IE3D) and measured values differ by 2.7 %; and the feed's reference point is not known:
      ``px`` = 2.1 mm, read from the shorted edge and drawn at 2.5 mm, moves the resonance by 1.8 % per mm
      (the benchmark's feed runs), and the short's width (5 mm) leaves 2.5 mm of doubt on where px starts,
      about 4.5 %;
    * the openEMS model within 2 % of openEMS's finest mesh: its own mesh study spans 1.6 % and is still
      moving down, and this grid is within 0.4 % of ours at 1.25 and 0.83 mm;
    * the 20 mm ground's shift between IE3D's +20.6 % and the measured +29.0 %, each widened by 5 points
      (the thesis re-matched the probe to px = 1.7 mm at L = 20; the feed stays at 2.5 mm here).
    """
    huynh = pifa.PIFADesign()
    f80, s11 = _resonance(huynh)
    f20, _ = _resonance(dataclasses.replace(huynh, ground_length=20e-3, ground_width=20e-3))
    openems, _ = _resonance(dataclasses.replace(huynh, feed_offset=5e-3, plate_shift=10e-3))
    shift = f20 / f80 - 1
    validation_figure(
        f"2.5 mm cells: 80 mm ground {f80 / 1e9:.4f} GHz ({100 * (f80 / 1.892e9 - 1):+.1f} % from the "
        f"measured 1.892 GHz), S11 {s11:.1f} dB; 20 mm ground {100 * shift:+.1f} % (measured +29.0 %, "
        f"IE3D +20.6 %); openEMS model's geometry {openems / 1e9:.4f} GHz (openEMS 1.8849-1.9149 GHz)")
    assert f80 == pytest.approx(1.892e9, rel=0.08)
    assert s11 < -10  # a 50 ohm match, as the thesis's px was chosen for
    assert openems == pytest.approx(1.8849e9, rel=0.02)
    assert 2343 / 1943 - 1 - 0.05 < shift < 2440 / 1892 - 1 + 0.05


def test_quarter_wave_formulas_close_on_their_branches():
    """Hirasawa and Haneishi's interpolation is the short plate's quarter wave at W = L1 and the pin's
    path at W -> 0; for Huynh's PIFA it lies between the two."""
    design = pifa.PIFADesign()
    full = pifa.quarter_wave_resonance(dataclasses.replace(design, short_width=design.length))
    assert full["interpolated"] == pytest.approx(SPEED_OF_LIGHT / (4 * (design.width + design.height)))
    thin = pifa.quarter_wave_resonance(dataclasses.replace(design, short_width=1e-9))
    path = design.length + design.width + design.height
    assert thin["interpolated"] == pytest.approx(SPEED_OF_LIGHT / (4 * path), rel=1e-6)
    estimates = pifa.quarter_wave_resonance(design)
    assert estimates["short_pin"] < estimates["interpolated"] < estimates["short_plate"]
    wide = pifa.quarter_wave_resonance(dataclasses.replace(design, length=40e-3, short_width=10e-3))
    assert wide["interpolated"] > wide["short_pin"]  # L1 > L2: the weight (W / L1)^(L1 / L2)


def test_pifa_refuses_designs_off_the_grid_and_impossible_ones():
    with pytest.raises(ConfigurationError, match="feed_offset = 2.1 mm"):
        pifa.pifa_simulation(pifa.PIFADesign(feed_offset=2.1e-3), cell=1.25e-3)
    with pytest.raises(ConfigurationError, match="short_width"):
        pifa.PIFADesign(short_width=30e-3)
    with pytest.raises(ConfigurationError, match="ground plane"):
        pifa.PIFADesign(ground_length=10e-3)
    with pytest.raises(ConfigurationError, match="height must be"):
        pifa.PIFADesign(height=-1e-3)
    with pytest.raises(ConfigurationError, match="height >= 2 cells"):
        pifa.pifa_simulation(pifa.PIFADesign(short_width=20e-3, feed_offset=10e-3), cell=10e-3)
    model = pifa.pifa_simulation(pifa.PIFADesign(), cell=COARSE)  # the feed: W / 2, 2.5 mm in from the corner
    assert model.port.center[:2] == pytest.approx((-7.5e-3, -7.5e-3), abs=1e-12)
