"""The validation record: every comparison of the suite with an independent reference, its tolerance,
and the test that makes it.

Each entry names a test (``path::function``; every parametrisation of it counts). The test fails when its
comparison leaves the stated tolerance, so a green test suite is the record. Tests that call the
``validation_figure`` fixture (``tests/conftest.py``) also store the figure they measured; ``make test``
writes those to ``build/validation/`` and the documentation site (``make docs``) shows them in its
"Validation record" page. ``tests/test_validation_record.py`` checks that every entry names an existing
test.
"""

import dataclasses
from collections import defaultdict


@dataclasses.dataclass(frozen=True)
class Validation:
    """One comparison: the ``area`` it belongs to, ``what`` is compared, against which ``reference``,
    within which ``tolerance``, in which ``test`` (``tests/...py::test_name``)."""

    area: str
    what: str
    reference: str
    tolerance: str
    test: str


_D = "Derivatives, geometry and units"
_EM = "Electromagnetics (mindelec)"
_MD = "Molecular dynamics (mindsponge)"
_ML = "Learned potentials and labels"

RECORD = [
    Validation(
        _D,
        'Laplacian and higher derivatives of networks (forward and reverse paths)',
        'the analytic derivatives of the same network',
        '1e-10 relative and absolute (float64)',
        "tests/common/test_autodiff.py::"
        "test_forward_paths_against_analytic_network",
    ),
    Validation(
        _D,
        'Monte Carlo volumes of CSG shapes',
        'analytic volumes',
        '4 standard errors',
        "tests/common/test_geometry.py::"
        "test_monte_carlo_volume_matches_analytic_value",
    ),
    Validation(
        _D,
        'Boundary samples and normals',
        'analytic boundaries',
        '1e-12',
        "tests/common/test_geometry.py::"
        "test_boundary_points_and_normals_match_the_analytic_boundary",
    ),
    Validation(
        _D,
        'Unit conversions and constants',
        'scipy.constants (CODATA) and ASE',
        '1e-14 to 1e-15 relative',
        "tests/common/test_units.py::"
        "test_conversions_against_scipy_and_ase",
    ),
    Validation(
        _EM,
        'Dielectric slab reflection and transmission (FDTD)',
        'transfer-matrix solution',
        '5e-3 in |r|^2 and |t|^2',
        "tests/mindelec/test_fdtd_validation.py::"
        "test_dielectric_slab_reflection_transmission_matches_transfer_matrix",
    ),
    Validation(
        _EM,
        '2D line source field (FDTD)',
        "Hankel-function Green's function",
        '1.5 % in amplitude, 0.03 rad in phase',
        "tests/mindelec/test_fdtd_validation.py::"
        "test_line_source_matches_hankel_green_function",
    ),
    Validation(
        _EM,
        'PEC cavity resonances (FDTD)',
        "analytic mode frequencies (and the grid's discrete ones)",
        '5e-3 relative (1e-5 from the discrete ones)',
        "tests/mindelec/test_fdtd_validation.py::"
        "test_pec_cavity_resonances",
    ),
    Validation(
        _EM,
        'TF/SF plane wave on a slab (TE and TM)',
        'transfer-matrix solution',
        '2e-2 in |r|^2; field leaking out of the total-field region < 1e-5',
        "tests/mindelec/test_fdtd_validation.py::"
        "test_plane_wave_tfsf_slab_reflection",
    ),
    Validation(
        _EM,
        '2D FDFD point source',
        "Hankel-function Green's function",
        '1 % in amplitude, 0.025 rad in phase',
        "tests/mindelec/test_fdfd.py::"
        "test_point_source_matches_hankel_green_function",
    ),
    Validation(
        _EM,
        'FDFD error order',
        "second-order convergence of the Green's-function error",
        'error ratio 3.5-4.5 on halving the cell',
        "tests/mindelec/test_fdfd.py::"
        "test_green_function_error_is_second_order",
    ),
    Validation(
        _EM,
        'Two-port S-parameters of a slab',
        'transfer-matrix solution',
        '0.03 in S11, 0.05 in S21; unitarity to 1e-4',
        "tests/mindelec/test_ports.py::"
        "test_slab_two_port_matches_transfer_matrix",
    ),
    Validation(
        _EM,
        '2D waveguide ports (FDTD)',
        'FDFD mode decomposition',
        '1e-4',
        "tests/mindelec/test_ports.py::"
        "test_waveguide_ports_in_2d_match_fdfd",
    ),
    Validation(
        _EM,
        'Rectangular metal waveguide TE_m0 cutoffs and propagation constants',
        'analytic values',
        "1.5 x the grid's own error estimate",
        "tests/mindelec/test_modes.py::"
        "test_rectangular_waveguide_te_m0_cutoff_and_beta",
    ),
    Validation(
        _EM,
        'Dielectric slab effective index (mode solver)',
        'the transcendental dispersion equation',
        '1e-3 (TM), 3e-3 (TE); error ratio 3.5-4.5 on halving the cell',
        "tests/mindelec/test_modes.py::"
        "test_slab_effective_index_matches_transcendental_equation",
    ),
    Validation(
        _EM,
        'Cavity modes through the PINN residuals (TE and TM)',
        'analytic Maxwell solutions',
        '1e-13 of the field scale',
        "tests/mindelec/test_pinn.py::"
        "test_te_cavity_mode_has_zero_residual",
    ),
    Validation(
        _EM,
        'Convergence order of a partly filled PEC cavity resonance (2D TE), with and without smoothing',
        'the transverse-resonance equation of the layered cavity',
        'fitted order 1.7-2.4 with smoothing, 0.8-1.4 without; smoothed errors below 1/20 of the plain ones',
        "tests/mindelec/test_smoothing.py::"
        "test_cavity_resonance_converges_at_second_order_with_smoothing",
    ),
    Validation(
        _EM,
        'Convergence order of a dielectric disk resonance in a PEC cavity (2D TE), full smoothed tensor',
        'method of particular solutions (Fourier-Bessel series; exact c / 2L for an empty cavity)',
        'fitted order above 1.65; relative error x N^2 below 0.6 and varying less than 2.5x (second order; '
        'CI 12-48 cells, MINDELEC_SUBPIXEL_FULL=1 12-128); the diagonal alone first order, 2.5x worse',
        "tests/mindelec/test_smoothing.py::"
        "test_full_tensor_converges_at_second_order_at_a_curved_interface",
    ),
    Validation(
        _EM,
        'Convergence order of a circular PEC cavity resonance (2D TE and TM), conformal PEC',
        "the first zero of J0' (TE) and of J0 (TM)",
        'fitted order above 1.7, relative error x N^2 varying less than 2.5x (CI 16-48 cells, '
        'MINDELEC_CONFORMAL_FULL=1 12-64); the staircase 20x worse or more at the finest size',
        "tests/mindelec/test_conformal.py::"
        "test_circular_cavity_converges_at_second_order",
    ),
    Validation(
        _EM,
        'Time step of the conformal PEC (merged cut cells), 2D TE',
        'the leapfrog stability bound and the staircase on the same cavity (probed H operator)',
        'largest eigenvalue below the bound and the staircase\'s at the Yee limit (courant 1)',
        "tests/mindelec/test_conformal.py::"
        "test_merged_cells_keep_the_yee_time_step",
    ),
    Validation(
        _EM,
        'Time step of the conformal PEC with compensated masses, 2D TM',
        'the leapfrog stability bound (probed H operator) at the Gershgorin-shortened step',
        'largest eigenvalue below the bound at courant 1 (measured 0.74-0.84 of it); masses summing to the '
        'area fractions',
        "tests/mindelec/test_conformal.py::"
        "test_2d_tm_small_faces_take_mass_and_the_step_is_bounded",
    ),
    Validation(
        _EM,
        'Conformal PEC in 3D: a spherical cavity\'s lowest mode',
        "the first zero of (x j1(x))' (probed H operator)",
        'the TM101 triplet alone within 35 %, none at the wall; error x N^2 below 1.2 and varying less than '
        '1.5x (12 and 16 cells); the staircase 10x worse; largest eigenvalue below 4',
        "tests/mindelec/test_conformal.py::"
        "test_3d_sphere_converges_at_second_order_without_spurious_modes",
    ),
    Validation(
        _EM,
        'Conformal PEC in 3D: a cylindrical cavity\'s modes along its axis',
        'TM010, TE111 and TM011 from the zeros of J0, J1\' and the cavity length (probed H operator)',
        'exactly those four modes within 35 % of TM010, none at the wall',
        "tests/mindelec/test_conformal.py::"
        "test_3d_cylinder_has_no_spurious_modes_along_its_axis",
    ),
    Validation(
        _EM,
        'Conformal rims of a zero-thickness PEC sheet: a septum in a cavity, its rim moved across a cell',
        'mode matching (the half-guides beside the sheet against the guide beyond its rim; N = 100 and 200 '
        'modes, extrapolated in 1/N), TM and TE',
        'the sheet within 0.1 cells of its drawn length, its spread over the positions under 0.02 cells '
        '(measured 0.0098 TM, 0.0036 TE; the staircase 0.9); the resonance monotonic in the rim',
        "tests/mindelec/test_conformal_sheets.py::"
        "test_septum_resonance_follows_the_rim_within_a_cell",
    ),
    Validation(
        _EM,
        'Second-order convergence of a zero-thickness PEC sheet: the septum at fixed rims, 4-16 cells per mm',
        'mode matching, TM and TE',
        'order above 1.7 from 4 to 16 cells per mm (measured 1.92-1.98 TM, 2.39-2.72 TE; TM 1.98-2.03 on to '
        '32 cells per mm); without the rims\' placement 0.81 and 0.83 at one rim',
        "tests/mindelec/test_conformal_sheets.py::"
        "test_septum_converges_at_second_order",
    ),
    Validation(
        _EM,
        'Second-order convergence of a PEC sheet in 3D fields: the septum between walls in y, 4 and 6 cells '
        'per mm',
        'mode matching lifted to k^2 = k_2D^2 + (pi/W)^2, TM_y and TE_y families',
        'order above 1.7 (measured 2.01 TM_y, 2.00 TE_y; before the rims\' placement the error grew)',
        "tests/mindelec/test_conformal_sheets.py::"
        "test_septum_between_walls_converges_at_second_order_in_3d",
    ),
    Validation(
        _EM,
        'Energy of the leapfrog with the smoothed tensor (eps 200 disk, random fields, 6000 steps)',
        'exact conservation of eps0 E^n.K^-1 E^n+1 + mu0 |H^n+1/2|^2 for a symmetric K; K positive definite',
        '1e-9 relative',
        "tests/mindelec/test_smoothing.py::"
        "test_smoothed_tensor_is_positive_definite_and_the_leapfrog_conserves_energy",
    ),
    Validation(
        _EM,
        'GDS layer areas as FDTD structures (2D polygons, 3D prisms)',
        "gdstk's polygon areas",
        '2e-3 relative (rasterised), 1e-9 (prism volume)',
        "tests/mindelec/test_gds.py::"
        "test_2d_layers_keep_the_layout_areas",
    ),
    Validation(
        _MD,
        'Per-term energies and forces of water boxes (PME, Ewald, cutoffs)',
        'OpenMM Reference platform',
        'energy 1e-6 relative, forces 1e-5 relative RMS',
        "tests/mindsponge/test_nonbonded.py::"
        "test_water_box_matches_openmm",
    ),
    Validation(
        _MD,
        'Small triclinic (rhombic dodecahedron) boxes',
        'OpenMM CPU platform (single precision)',
        'energy 2e-6 relative, forces 2e-5 relative RMS',
        "tests/mindsponge/test_nonbonded.py::"
        "test_small_dodecahedron_matches_openmm_cpu",
    ),
    Validation(
        _MD,
        'PME parameters from the error tolerance',
        "OpenMM's choice of grid and splitting",
        'same grid, alpha to 1e-12',
        "tests/mindsponge/test_nonbonded.py::"
        "test_pme_parameters_from_tolerance_match_openmm",
    ),
    Validation(
        _MD,
        'Energies and pressure of a running simulation',
        'OpenMM Reference platform',
        'kinetic 1e-12 relative; pressure 1 % (2 bar)',
        "tests/mindsponge/test_simulation.py::"
        "test_energies_and_pressure_match_openmm",
    ),
    Validation(
        _MD,
        'SETTLE step',
        "OpenMM's SETTLE",
        '1e-9 nm positions, 1e-10 nm bond lengths',
        "tests/mindsponge/test_constraints.py::"
        "test_settle_one_step_matches_openmm",
    ),
    Validation(
        _MD,
        'Canonical kinetic-energy distribution (Langevin, Bussi, Nose-Hoover)',
        'the analytic distribution (physical-validation)',
        'mean within 4 standard errors; width within 4 sigma',
        "tests/mindsponge/test_thermostats.py::"
        "test_canonical_kinetic_energy",
    ),
    Validation(
        _MD,
        'Ideal-gas volume distribution (Monte Carlo barostat)',
        'the analytic gamma distribution',
        'mean 1 %; Kolmogorov-Smirnov p > 1e-3',
        "tests/mindsponge/test_simulation.py::"
        "test_monte_carlo_barostat_ideal_gas_volume_distribution",
    ),
    Validation(
        _MD,
        'HMR + HBonds at 4 fs: temperature, potential and heavy-atom bond energy',
        'OpenMM LangevinMiddleIntegrator (its velocities projected on the constraints)',
        'run means (3 ours, 10 OpenMM, 4 ps each) equal: two-sample t below 4.5 (p = 1e-3)',
        "tests/mindsponge/test_openmm_system_truth.py::"
        "test_hmr_hbonds_at_4fs_through_load_agrees_with_openmm",
    ),
    Validation(
        _MD,
        'Triclinic minimum image and volumes',
        'brute force and ASE',
        '1e-10 nm (float64), 2e-5 (float32)',
        "tests/mindsponge/test_space.py::"
        "test_minimum_image_triclinic_matches_brute_force_and_ase",
    ),
    Validation(
        _MD,
        'H5MD trajectories',
        'MDAnalysis reader',
        '1e-4 Angstrom positions, 1e-6 box',
        "tests/mindsponge/test_simulation.py::"
        "test_h5md_reporter_read_by_mdanalysis",
    ),
    Validation(
        _EM,
        'Fluxes (plane, flux box, near-to-far surface) of a float32 run at 100 nm, 1 um, 1 mm and 1 m cells',
        'the float64 run of the same problem',
        '1e-3 relative',
        "tests/mindelec/test_fdtd_units.py::"
        "test_float32_fluxes_are_within_a_thousandth_of_float64_at_any_scale",
    ),
    Validation(
        _MD,
        'The compiled step loop (every integrator and thermostat it runs; PME, reaction field, virtual '
        'sites, SETTLE, RATTLE, called-back terms, compiled torsion restraints)',
        'the same steps in Python (torch operations)',
        '1e-12 nm after 20 steps (float64); bit for bit across thread counts (mixed precision)',
        "tests/mindsponge/test_step_loop.py::"
        "test_every_integrator_and_thermostat_agrees_with_the_python_steps",
    ),
    Validation(
        _MD,
        'TIP4P-Ew water density under the System\'s MonteCarloBarostat (molecules with their virtual sites)',
        'OpenMM CPU, same System and protocol',
        '4 combined standard errors (pymbar statistical inefficiency, low for series this short)',
        "tests/mindsponge/test_npt.py::"
        "test_tip4pew_density_matches_openmm",
    ),
    Validation(
        _MD,
        'Density of alanine dipeptide in TIP4P-Ew with 0.15 M NaCl under the System\'s MonteCarloBarostat',
        'OpenMM CPU, same System and protocol',
        '4 combined standard errors (pymbar statistical inefficiency, low for series this short)',
        "tests/mindsponge/test_npt.py::"
        "test_tip4pew_peptide_box_density_matches_openmm",
    ),
    Validation(
        _MD,
        'Molecules of 4- and 5-site water (TIP4P-Ew, TIP5P)',
        "OpenMM's Context.getMolecules",
        'the same molecules',
        "tests/mindsponge/test_npt.py::"
        "test_water_with_virtual_sites_is_one_molecule",
    ),
    Validation(
        _MD,
        'MBAR free energies of temperature replica exchange (harmonic tethers)',
        'analytic: (3N/2) ln(T0/Tk)',
        '4 standard errors',
        "tests/mindsponge/test_replica_exchange.py::"
        "test_mbar_free_energies_of_harmonic_tethers_match_the_analytic_ones",
    ),
    Validation(
        _MD,
        'REMD of alanine dipeptide: alpha_R population at 300 K',
        'a plain 300 K run ten times longer',
        '3 combined standard errors (block averages)',
        "tests/mindsponge/test_replica_exchange.py::"
        "test_remd_gives_the_phi_populations_of_a_long_plain_run",
    ),
    Validation(
        _MD,
        'Umbrella sampling of phi as Hamiltonian replica exchange',
        'independent windows from the same starts',
        'RMS 2 kJ/mol below 25 kJ/mol',
        "tests/mindsponge/test_replica_exchange.py::"
        "test_umbrella_sampling_as_hrex_matches_independent_windows",
    ),
    Validation(
        _MD,
        'Replica exchange on a Dask cluster of two worker processes, one killed mid-run; continued from a '
        'checkpoint',
        'the same run in one process',
        'bit for bit',
        "tests/mindsponge/test_replica_exchange.py::"
        "test_dask_workers_give_the_single_process_run_and_survive_a_killed_worker",
    ),
    Validation(
        _ML,
        'GFN2-xTB energies and forces',
        "tblite's own ASE calculator",
        'energy 1e-5 relative, forces 1e-3 of the largest',
        "tests/mindsponge/test_labels.py::"
        "test_xtb_energy_and_forces_match_tblite_ase_calculator",
    ),
    Validation(
        _ML,
        'GFN2-xTB forces',
        'finite differences of the energy',
        '2e-3 of the largest force',
        "tests/mindsponge/test_labels.py::"
        "test_xtb_forces_are_minus_finite_differences",
    ),
    Validation(
        _ML,
        'Labels of a GFN2-xTB run driven by an umbrella restraint (the restraint taken out)',
        "tblite's own calculators at the recorded frames",
        'energy 1e-2 kJ/mol (the SCF restarts from the previous step), forces 1e-3 of the largest',
        "tests/mindsponge/test_claisen.py::"
        "test_umbrella_reference_labels_its_frames_without_the_restraints",
    ),
    Validation(
        _ML,
        'Normal-mode samples',
        'the classical harmonic distribution',
        'mean energy 5 %; no rigid-body motion to 1e-12',
        "tests/mindsponge/test_labels_normal_modes.py::"
        "test_samples_follow_the_classical_harmonic_distribution",
    ),
    Validation(
        _ML,
        'extxyz and ASE database exports',
        "ASE's readers (eV, Angstrom)",
        '1e-7',
        "tests/mindsponge/test_labels_io.py::"
        "test_ase_reads_our_extxyz_and_db_in_ev_and_angstrom",
    ),
    Validation(
        _EM,
        'Hertzian dipole power through a closed flux box (edges counted once)',
        'eta0 k^2 |I l|^2 / (6 pi)',
        '2 %',
        "tests/mindelec/test_fdtd_far_field.py::"
        "test_flux_box_gives_the_dipole_power_where_six_planes_over_count",
    ),
    Validation(
        _EM,
        'Near-to-far-field pattern of a Hertzian dipole',
        'sin^2 theta',
        '1 %',
        "tests/mindelec/test_fdtd_far_field.py::"
        "test_near_to_far_pattern_follows_sin_squared",
    ),
    Validation(
        _EM,
        'Hertzian dipole directivity',
        '1.5',
        '1 %',
        "tests/mindelec/test_fdtd_far_field.py::"
        "test_near_to_far_directivity_and_power",
    ),
    Validation(
        _EM,
        'Half-wave dipole with a lumped port: power balance, pattern, directivity',
        'accepted = flux = far-field power; cos(pi/2 cos theta)/sin theta; 1.64',
        '0.5 %; 3 % of the peak; 2 %',
        "tests/mindelec/test_lumped.py::"
        "test_half_wave_dipole_power_balance_pattern_and_directivity",
    ),
    Validation(
        _EM,
        'Thin-wire dipole series resonance',
        '73 ohm (thin-wire theory)',
        '10 %',
        "tests/mindelec/test_lumped.py::"
        "test_half_wave_dipole_resonates_at_the_thin_wire_resistance",
    ),
    Validation(
        _EM,
        'Moment-method thin-wire dipole (the reference of the thin-wire tests)',
        "its own convergence in segments; King's 73 + j42.5 ohm for a vanishing radius",
        '0.5 % between 100 and 200 segments; 10 % of King at a = 1e-5 lambda',
        "tests/mindelec/test_thin_wire.py::"
        "test_moment_method_converges_and_approaches_king_for_a_vanishing_radius",
    ),
    Validation(
        _EM,
        "Thin-wire (sub-cell radius) dipole: series resonance, its resistance, reactance slope; "
        "the half-wave impedance at a = lambda/100000",
        "moment-method dipole of the same length and radius (L/a = 500, 5000, 50000); "
        "King's 73.1 + j42.5 ohm",
        '0.5 %; 2 %; 2 %; 10 %',
        "tests/mindelec/test_thin_wire.py::"
        "test_thin_wire_dipole_against_the_moment_method",
    ),
    Validation(
        _EM,
        "Quarter-wave monopole on an infinite PEC ground, lumped port at its base: series resonance and its "
        "resistance, Z(lambda/4), directivity, E-plane pattern, power balance (coarse: 10.5 cells high)",
        "half the moment-method dipole of twice its height (image theory); King's 36.5 + j21.25 ohm; 3.28 "
        "(5.16 dBi); cos(pi/2 cos theta)/sin theta; accepted = flux = far-field power",
        '0.5 %; 3 %; 10 %; 2 %; 2 % of the peak; 1 %',
        "tests/mindelec/test_monopole.py::"
        "test_quarter_wave_monopole_coarse",
    ),
    Validation(
        _EM,
        "Quarter-wave monopole, 20.5 cells high, 2h/a = 5000 and 50000 (as the coarse one)",
        "half the moment-method dipole; King's 36.5 + j21.25 ohm; 3.28; the half-wave pattern; the port",
        '0.2 %; 1.5 %; 12 %; 1 %; 1 % of the peak; 0.5 %',
        "tests/mindelec/test_monopole.py::"
        "test_quarter_wave_monopole_fine",
    ),
    Validation(
        _EM,
        "Far field over a PEC ground plane (images of the near-to-far currents)",
        "the array factors 4 sin^2(kd cos theta) and 4 cos^2(kd cos theta) of horizontal and vertical "
        "electric and magnetic current elements at height d (Balanis 4.7); the half-space's power",
        '1e-9; 1e-6',
        "tests/mindelec/test_monopole.py::"
        "test_over_ground_images_follow_the_array_factor",
    ),
    Validation(
        _EM,
        "Planar inverted-F antenna (air, 20 x 20 x 10 mm, 5 mm short, 50 ohm lumped port) on 2.5 mm cells: "
        "resonance on an 80 mm ground, its shift on a 20 mm ground; the same antenna as an openEMS model "
        "draws it",
        "Huynh's measured 1892 MHz and +29.0 % (IE3D +20.6 %; M.S. thesis, Virginia Tech 2000, Table 5-1); "
        "openEMS 1.8849 GHz at its finest mesh (king-aj3/EMStudioFree)",
        "8 % (the feed's reference point is not known, about 5 %); 2 %; between IE3D's and the measured "
        "shift, 5 points wider",
        "tests/mindelec/test_pifa.py::"
        "test_pifa_against_the_measured_resonance_and_openems",
    ),
    Validation(
        _EM,
        "Two-wire moment method (two parallel half-wave dipoles, the reference of the multi-port tests): "
        "Z21 and Z11 extrapolated to a vanishing radius",
        "Carter's induced-EMF mutual impedance (Balanis 8-68) at d = 0.25, 0.5, 1 lambda; 73.1 + j42.5 ohm",
        '3 %; 2 %',
        "tests/mindelec/test_multiport.py::"
        "test_two_wire_moment_method_tends_to_the_induced_emf_mutual_impedance",
    ),
    Validation(
        _EM,
        "Envelope correlation: the S-parameter route; the far-field route",
        "the printed formula of Blanch, Romeu & Corbella (2003); the closed form for two parallel short "
        "dipoles d apart",
        '1e-12 relative; 1e-9',
        "tests/mindelec/test_multiport.py::"
        "test_s_parameter_correlation_is_blanch_formula_and_far_field_correlation_of_short_dipoles",
    ),
    Validation(
        _EM,
        "Two parallel thin-wire dipoles d = lambda/4 apart, two lumped ports (multi-port FDTD): Z21 and Z11 "
        "over L = 0.40-0.55 lambda; reciprocity and passivity; envelope correlation and total efficiencies "
        "of the S-parameter and far-field routes; Touchstone round trip",
        "the two-wire moment method at the same length and radius; S12 = S21, singular values <= 1; each "
        "other (lossless antennas); scikit-rf reading the .s2p",
        '5 %; 2e-3, 1; 0.005 absolute, 1 %; 1e-6',
        "tests/mindelec/test_multiport.py::"
        "test_parallel_dipoles_against_the_moment_method_and_the_two_correlation_routes",
    ),
    Validation(
        _EM,
        "Two parallel thin-wire dipoles at d = lambda/2 and lambda: Z21 over L = 0.45-0.55 lambda",
        "the two-wire moment method at the same length and radius",
        '5 %',
        "tests/mindelec/test_multiport.py::"
        "test_parallel_dipoles_at_larger_spacings",
    ),
    Validation(
        _EM,
        "Crossed thin-wire dipoles a quarter wavelength apart: coupling and envelope correlation",
        "zero by symmetry (up to the half cell the grid puts between the x dipole and the z dipole's "
        "mid-plane)",
        '|S21| < -50 dB; ECC < 1e-5 by either route',
        "tests/mindelec/test_multiport.py::"
        "test_crossed_dipoles_are_uncorrelated",
    ),
    Validation(
        _EM,
        'Thin wire at the radius 0.1985 cells (end correction off); compiled, torch and differentiable paths',
        "the bare line of zeroed edges (the square lattice's equivalent radius); each other",
        '1e-9 relative',
        "tests/mindelec/test_thin_wire.py::"
        "test_thin_wire_at_the_bare_line_radius_is_the_bare_line_and_paths_agree",
    ),
    Validation(
        _EM,
        'Lumped port closing a wire loop through a resistor',
        'the 100 ohm resistor in series with the loop inductance',
        'Re Z within 1 % of 100 ohm; Im Z / omega constant within 2 %',
        "tests/mindelec/test_lumped.py::"
        "test_port_into_a_resistor_loop_sees_the_series_circuit",
    ),
    Validation(
        _EM,
        'Straight 3D metallic waveguide with mode ports',
        'a lossless matched line (|S21| = 1, S11 = 0; TE10 phase delay)',
        '|S21| >= 0.99, |S11| <= 0.01, 0.05 rad',
        "tests/mindelec/test_mode_ports.py::"
        "test_straight_metallic_waveguide_is_transparent",
    ),
    Validation(
        _EM,
        'Dielectric step in a metallic waveguide',
        'single-mode mode matching',
        '0.01 in |S11| and |S21|',
        "tests/mindelec/test_mode_ports.py::"
        "test_dielectric_step_in_metallic_waveguide_matches_mode_matching",
    ),
    Validation(
        _EM,
        'Width step in a 2D slab waveguide (TE and TM)',
        'FDFD on the same lines',
        '0.01 in complex S11 and S21',
        "tests/mindelec/test_mode_ports.py::"
        "test_width_step_in_2d_matches_fdfd",
    ),
    Validation(
        _EM,
        'Peak spatial-average SAR over 1 g and 10 g cubes (uniform, exp(-2z/delta), a hot corner voxel)',
        'the closed-form cube means',
        '1e-12 relative (whole-voxel cubes), 2.5e-3 (a fractional voxel layer)',
        "tests/mindelec/test_sar.py::"
        "test_decaying_sar_peaks_at_the_surface_with_the_closed_form_mean",
    ),
    Validation(
        _EM,
        '1 g and 10 g SAR of the 900 MHz reference dipole 15 mm under a flat phantom (5 mm cells)',
        'IEEE Std 1528 / IEC 62209-1 reference values, 10.8 and 6.99 W/kg per W',
        '15 %',
        "tests/mindelec/test_sar.py::"
        "test_reference_dipole_sar_on_a_coarse_grid",
    ),
    Validation(
        _EM,
        'Power balance of a dipole over a lossy phantom: radiated + absorbed over accepted',
        'conservation of energy (1)',
        '1 %',
        "tests/mindelec/test_sar.py::"
        "test_power_balance_of_the_dipole_over_the_phantom",
    ),
    Validation(
        _MD,
        'HMR + HBonds LangevinMiddle steps at negligible friction',
        'OpenMM Reference platform',
        '5e-5 nm positions',
        "tests/mindsponge/test_openmm_system_truth.py::"
        "test_langevin_middle_steps_as_openmm_with_hmr_and_hbonds",
    ),
    Validation(
        _ML,
        'MACE wrapper energies and forces',
        "mace-torch's own MACECalculator",
        '1e-10 relative',
        "tests/mindsponge/test_potentials_mace.py::"
        "test_energies_and_forces_equal_mace_calculator",
    ),
]


def by_area() -> dict[str, list[Validation]]:
    """The record grouped by area, in the order above."""
    groups = defaultdict(list)
    for entry in RECORD:
        groups[entry.area].append(entry)
    return dict(groups)
