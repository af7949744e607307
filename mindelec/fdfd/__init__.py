"""2D finite-difference frequency-domain (FDFD) solver with adjoint gradients.

The solver computes the steady-state fields of a 2D structure driven at one angular
frequency ``omega = 2 pi frequency``, on the Yee grid and with the units of
:mod:`mindelec.fdtd` (SI; the domain spans ``[-size/2, size/2]`` along each axis; the
perfectly matched layer lies inside it, ``pml_thickness`` cells thick; ``cell_size`` is
the cell size in metres).

Time convention
---------------
Phasors carry ``exp(+j omega t)`` (the engineering convention): a real field is
``Re(F exp(j omega t))`` and an outgoing wave is ``exp(-j k r)``. Maxwell's equations read
``curl E = -j omega mu H - M`` and ``curl H = j omega eps E + J``.

Polarisations and the equations solved
--------------------------------------
``"TM"`` (fields Ez, Hx, Hy; source: electric current density Jz, A/m^2)::

    d2Ez/dx2 + d2Ez/dy2 + k0^2 eps_r Ez = j omega mu0 Jz

``"TE"`` (fields Hz, Ex, Ey; source: magnetic current density Mz, V/m^2)::

    d/dx (1/eps_r dHz/dx) + d/dy (1/eps_r dHz/dy) + k0^2 Hz = j omega eps0 Mz

with ``k0 = omega / c``. A line current ``I`` (A) in vacuum gives the TM field
``Ez = -(omega mu0 I / 4) H0^(2)(k0 r)`` (``H0^(2)`` the Hankel function of the second kind,
outgoing for ``exp(+j omega t)``); a magnetic line current ``K`` (V) gives
``Hz = -(omega eps0 K / 4) H0^(2)(k0 r)``. (FDTD DFT fields computed with the kernel
``exp(-j omega t)`` follow the same convention.)

Grid (Yee staggering)
---------------------
The grid is that of :mod:`mindelec.fdtd` (a :class:`mindelec.fdtd.Grid`): an axis of length ``L`` has
``N = round(L / cell_size)`` cells of spacing ``d = L / N``, integer nodes at ``-L/2 + i d`` and half nodes at
``-L/2 + (i + 1/2) d`` (``i = 0 .. N-1``). TM: Ez on the integer nodes (``(x_i, y_j)``), Hy at
``(x_i + dx/2, y_j)``, Hx at ``(x_i, y_j + dy/2)``. TE: Hz on the half nodes
(``(x_i + dx/2, y_j + dy/2)``), Ey half a cell further along x, Ex half a cell further along y.
The main field (Ez or Hz) and the permittivity array share the main-field nodes
(:attr:`Simulation.coordinates`); arrays have shape ``(Nx, Ny)``, x first. TE needs
``1/eps_r`` between main nodes; it uses the arithmetic mean of the two neighbouring
permittivities. The main field is zero one node beyond each edge of the domain (a wall
behind the PML, where the field has already decayed).

Stretched-coordinate PML
------------------------
Each derivative ``d/dx`` becomes ``(1/s_x) d/dx`` with ``s_x = 1 - j sigma_x / (omega eps0)``
and a polynomial grading ``sigma_x(d) = sigma_max (d / L)^m`` (``d`` the depth into a PML of
thickness ``L``; ``m = 3``; ``sigma_max = -(m + 1) ln(R) / (2 eta0 L)`` for a nominal normal
incidence reflection ``R = 1e-8``). ``s`` is evaluated where each difference lands (the main
nodes or the half nodes between them). A point source's field changes by less than 1e-5 of
its value when the PML is moved further out (tests/mindelec/test_fdfd.py).

Sources and comparison with the FDTD
------------------------------------
Current densities are per node, with the normalisation of :mod:`mindelec.fdtd` sources: a
point source of amplitude ``I`` is ``I / (dx dy)`` on one node, a line source of amplitude
``K`` is ``K / d`` on a row of nodes. An FDTD DFT field ``sum_n E(t_n) exp(-j omega t_n) dt``
divided by the DFT of its source current (at the times the FDTD applies it) is the FDFD field
of a unit harmonic current at the frequency the leapfrog scheme actually solves,
``sin(pi f dt) / (pi dt)`` (``dt`` the FDTD step): the two then agree to 4e-4 on a dielectric
scatterer (tests/mindelec/test_fdfd_vs_fdtd.py).

Adjoint gradients
-----------------
:func:`solve_linear_system` (module :mod:`mindelec.fdfd.linear`, where the backward pass is
derived) solves ``A x = b`` with one sparse LU factorisation and one adjoint solve per backward
pass; batches of sources share the factorisation.

Modules: :mod:`~mindelec.fdfd.simulation` (the :class:`Simulation`: grid, PML, sources, solve,
flux, modes) and :mod:`~mindelec.fdfd.linear` (the differentiable sparse solve). The grid is
:class:`mindelec.fdtd.Grid`.

Example:
    >>> import torch, mindelec as me
    >>> eps = torch.ones(100, 100, dtype=torch.float64, requires_grad=True)
    >>> sim = me.fdfd.Simulation(size=(1e-3, 1e-3), cell_size=1e-5, frequency=1e12,
    ...                          permittivity=eps, pml_thickness=15)
    >>> ez = sim.solve(sim.point_source((0.0, 0.0)))      # (100, 100) complex128
    >>> sim.flux(ez, axis="x", position=3e-4).backward()   # gradient in eps.grad
"""

from .linear import solve_linear_system
from .simulation import PML_ORDER, PML_REFLECTION, Simulation, WaveguideMode

__all__ = ["Simulation", "WaveguideMode", "solve_linear_system", "PML_ORDER", "PML_REFLECTION"]
