"""The CLI's field picture outlines the structures (the shipped example's dielectric disk)."""

import pathlib

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.contour import ContourSet  # noqa: E402

from common import config as configuration  # noqa: E402
from mindelec import cli  # noqa: E402

EXAMPLE = pathlib.Path(cli.__file__).parent / "examples" / "dipole2d.toml"


def test_field_picture_outlines_the_disk():
    run = configuration.load(EXAMPLE, cli.RunConfig)
    run.until /= 4  # the outline does not depend on the duration; a quarter keeps two snapshots
    sim = cli.build_simulation(run)
    result = sim.run(until=run.until, progress=False)
    figure = cli.field_figure(run, sim, result)
    disk = run.structures[0]
    for axis in figure.axes[:2]:  # the snapshot and the DFT magnitude (the others are colour bars)
        contours = [artist for artist in axis.get_children() if isinstance(artist, ContourSet)]
        assert [c.get_label() for c in contours] == ["structure 0"]
        # the outline is the disk's circle, in mm: every vertex at the radius from the centre
        vertices = np.concatenate([path.vertices for path in contours[0].get_paths()])
        radii = np.hypot(vertices[:, 0] - disk.center[0] * 1e3, vertices[:, 1] - disk.center[1] * 1e3)
        cell = run.grid.cell_size * 1e3
        assert np.abs(radii - disk.radius * 1e3).max() < cell / 2
        assert axis.get_xlabel() == "x (mm)"
    plt.close(figure)


def test_subpixel_key_reaches_the_simulation(tmp_path):
    text = EXAMPLE.read_text().replace("[grid]\n", "[grid]\nsubpixel = true\n")
    (tmp_path / "smooth.toml").write_text(text)
    run = configuration.load(tmp_path / "smooth.toml", cli.RunConfig)
    assert cli.build_simulation(run).subpixel is True
    assert cli.build_simulation(configuration.load(EXAMPLE, cli.RunConfig)).subpixel is False
