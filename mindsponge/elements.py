"""Chemical elements: symbols, atomic numbers and standard atomic masses (from ``ase.data``).

An element is its symbol (``"C"``, ``"Cl"``); ``None`` marks a massless extra particle
(a virtual site such as the TIP4P ``M`` site, OpenMM's ``element=None``), with atomic
number 0 and mass 0.
"""

from ase.data import atomic_masses, atomic_numbers, chemical_symbols

__all__ = ["atomic_number", "is_element", "mass", "normalize_symbol"]

# ase lists "X" (a dummy atom) as element 0; mindsponge spells that None
_SYMBOLS = {symbol.upper(): symbol for symbol in chemical_symbols[1:]}


def normalize_symbol(text):
    """The element symbol spelled the standard way (``"CL"`` -> ``"Cl"``), or ``None`` if unknown."""
    return _SYMBOLS.get(text.strip().upper())


def is_element(symbol):
    """Whether ``symbol`` is a correctly spelled element symbol."""
    return symbol in atomic_numbers and symbol != "X"


def atomic_number(symbol):
    """Atomic number of ``symbol`` (0 for ``None``, an extra particle)."""
    return 0 if symbol is None else atomic_numbers[symbol]


def mass(symbol):
    """Standard atomic mass of ``symbol`` in amu (0 for ``None``, an extra particle)."""
    return 0.0 if symbol is None else float(atomic_masses[atomic_numbers[symbol]])
