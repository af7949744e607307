"""The head tissue-simulating liquid of the SAR measurement standards: its target permittivity and
conductivity per frequency, and its density.

The table is the target dielectric properties of the head tissue-equivalent liquid of IEEE Std 1528-2013
(Table 3) and IEC/IEEE 62209-1528:2020, which reproduce and extend IEEE Std 1528-2003 / IEC 62209-1:2005
(the same values stand in FCC KDB 865664 D01 and in the SPEAG dipole calibration certificates, e.g.
36.0 / 4.66 S/m at 5200 MHz, 35.3 / 5.27 S/m at 5800 MHz). Between tabulated frequencies the standard
interpolates linearly; outside 300-6000 MHz it gives no values and :func:`head_tissue_properties` refuses.
"""

import bisect
import math

from common.errors import ConfigurationError

#: (frequency (MHz), relative permittivity, conductivity (S/m)) of the head tissue-simulating liquid
HEAD_TISSUE_TABLE = (
    (300.0, 45.3, 0.87),
    (450.0, 43.5, 0.87),
    (750.0, 41.9, 0.89),
    (835.0, 41.5, 0.90),
    (900.0, 41.5, 0.97),
    (1450.0, 40.5, 1.20),
    (1500.0, 40.4, 1.23),
    (1640.0, 40.2, 1.31),
    (1750.0, 40.1, 1.37),
    (1800.0, 40.0, 1.40),
    (1900.0, 40.0, 1.40),
    (2000.0, 40.0, 1.40),
    (2100.0, 39.8, 1.49),
    (2300.0, 39.5, 1.67),
    (2450.0, 39.2, 1.80),
    (2600.0, 39.0, 1.96),
    (3000.0, 38.5, 2.40),
    (3500.0, 37.9, 2.91),
    (4000.0, 37.4, 3.43),
    (4500.0, 36.8, 3.94),
    (5000.0, 36.2, 4.45),
    (5200.0, 36.0, 4.66),
    (5400.0, 35.8, 4.86),
    (5600.0, 35.5, 5.07),
    (5800.0, 35.3, 5.27),
    (6000.0, 35.1, 5.48),
)

#: the mass density the standards assign to the tissue-simulating liquid (kg/m^3)
TISSUE_DENSITY = 1000.0


def head_tissue_properties(frequency):
    """The head liquid's target ``(relative permittivity, conductivity (S/m))`` at ``frequency`` (Hz).

    Linear interpolation in :data:`HEAD_TISSUE_TABLE` between the tabulated frequencies.

    Raises:
        ConfigurationError: for a frequency that is not finite or lies outside the table (300-6000 MHz).
    """
    megahertz = float(frequency) / 1e6
    low, high = HEAD_TISSUE_TABLE[0][0], HEAD_TISSUE_TABLE[-1][0]
    if not (math.isfinite(megahertz) and low <= megahertz <= high):
        raise ConfigurationError(
            f"head_tissue_properties: frequency {float(frequency):.6g} Hz is outside the standard's table "
            f"of head tissue-simulating liquids ({low:g}-{high:g} MHz)"
        )
    frequencies = [row[0] for row in HEAD_TISSUE_TABLE]
    upper = min(bisect.bisect_left(frequencies, megahertz), len(HEAD_TISSUE_TABLE) - 1)
    (f0, eps0, sigma0), (f1, eps1, sigma1) = HEAD_TISSUE_TABLE[max(upper - 1, 0)], HEAD_TISSUE_TABLE[upper]
    weight = 0.0 if f1 == f0 else (megahertz - f0) / (f1 - f0)
    return eps0 + weight * (eps1 - eps0), sigma0 + weight * (sigma1 - sigma0)


def head_tissue(frequency):
    """The head liquid at ``frequency`` (Hz) as a :class:`~mindelec.fdtd.Medium` (non-dispersive: its
    permittivity and conductivity hold at this one frequency). See :func:`head_tissue_properties`."""
    from mindelec.fdtd import Medium

    permittivity, conductivity = head_tissue_properties(frequency)
    return Medium(permittivity=permittivity, conductivity=conductivity)
