"""SAR: the specific absorption rate of a device's fields in a tissue phantom (IEEE Std 1528, IEC 62209).

* :mod:`~mindelec.sar.tissue` - the head tissue-simulating liquid's target properties (300-6000 MHz).
* :mod:`~mindelec.sar.averaging` - local SAR and its peak average over 1 g and 10 g cubes.
* :mod:`~mindelec.sar.phantom` - the flat phantom for FDTD; SAR and absorbed power per watt from a run.
* :mod:`~mindelec.sar.reference` - the standards' reference dipoles over the flat phantom (system validation).

Example::

    import mindelec as me
    setup = me.sar.dipole_over_phantom(900e6, cell_size=3e-3, liquid_size=(0.24, 0.15, 0.09))
    figures = me.sar.validate_dipole(setup)
    figures["sar_1g"], figures["sar_10g"]    # W/kg per W accepted at the feed
"""

from .averaging import CubeAverage, local_sar, mass_averaged_sar
from .phantom import FlatPhantom
from .reference import REFERENCE_DIPOLES, DipoleSetup, ReferenceDipole, dipole_over_phantom, validate_dipole
from .tissue import HEAD_TISSUE_TABLE, TISSUE_DENSITY, head_tissue, head_tissue_properties

__all__ = [
    "local_sar",
    "mass_averaged_sar",
    "CubeAverage",
    "FlatPhantom",
    "REFERENCE_DIPOLES",
    "ReferenceDipole",
    "DipoleSetup",
    "dipole_over_phantom",
    "validate_dipole",
    "HEAD_TISSUE_TABLE",
    "TISSUE_DENSITY",
    "head_tissue",
    "head_tissue_properties",
]
