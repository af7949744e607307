"""common: the differentiable-physics core shared by mindelec and mindsponge.

Submodules are imported on demand (``from common import autodiff``); importing
``common`` itself does no work.
"""

__version__ = "0.1.0"
