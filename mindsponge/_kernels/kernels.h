// The compiled CPU kernels of mindsponge, as one module (module.cpp binds them to Python):
//
//   bonded.cpp        bonds, angles, torsions, impropers (BondedTerm, *_forces)
//   nonbonded.cpp     Lennard-Jones + Coulomb over explicit pairs (PairTerm, pair_forces)
//   expression_term.cpp  pair energies of a lowered expression of r (ExpressionPairTerm: custom bonds, pairs)
//   cluster_forces.cpp, cluster_search.cpp, cell_search.cpp, pme.cpp: the neighbour-list and PME kernels
//   constraints.cpp   SETTLE, SHAKE, RATTLE
//   dynamics.cpp      the step loop: integrators, thermostats, constraints and forces without Python
//
// Every kernel takes float32 or float64 CPU tensors and computes in their type, accumulating energies in
// double. Results never depend on the number of threads: work that is split is split into chunks fixed by
// the size of the problem, and the chunks' sums are added in chunk order.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "pair_terms.h"

namespace mindsponge_kernels {

// --- force terms the step loop evaluates -------------------------------------------------------------

// One additive part of the potential. add_forces adds -dE/dx at positions (N, 3), contiguous, in the compute
// type) into forces (N, 3, same type) and returns E (kJ/mol); box is (3, 3) in the same type, or undefined
// without periodic boundaries.
class ForceTerm {
 public:
  virtual ~ForceTerm() = default;
  virtual double add_forces(const at::Tensor& positions, const at::Tensor& box, at::Tensor& forces) = 0;
};

enum class BondedKind : int64_t { kBond = 0, kAngle = 1, kTorsion = 2, kImproper = 3 };

// Bonds (length, k), angles (angle, k), torsions (periodicity, phase, k) or impropers (angle, k) of
// mindsponge.forcefield.bonded; parameters are kept in double.
class BondedTerm : public ForceTerm {
 public:
  BondedTerm(BondedKind kind, at::Tensor atoms, std::vector<at::Tensor> parameters, double period);
  double add_forces(const at::Tensor& positions, const at::Tensor& box, at::Tensor& forces) override;

 private:
  BondedKind kind_;
  at::Tensor atoms_;
  std::vector<at::Tensor> parameters_;
  double period_;
};

// Lennard-Jones + Coulomb over a fixed list of pairs (the all-pairs list without a cutoff, exceptions,
// exclusion corrections), the first len(epsilon4) pairs with Lennard-Jones; periodic: minimum images.
class PairTerm : public ForceTerm {
 public:
  PairTerm(at::Tensor first, at::Tensor second, at::Tensor charge_products, at::Tensor sigma_squared,
           at::Tensor epsilon4, double cutoff, double switch_distance, int64_t kind, double alpha, double krf,
           double crf, bool periodic);
  double add_forces(const at::Tensor& positions, const at::Tensor& box, at::Tensor& forces) override;

 private:
  at::Tensor first_, second_, charge_products_, sigma_squared_, epsilon4_, gradients_;
  PairOptions options_;
  bool periodic_;
};

// Non-bonded forces with a cutoff (mindsponge.forcefield.nonbonded.Nonbonded, methods cutoff, reaction field, PME):
// the cluster-pair list, the direct sum, exceptions and exclusion corrections (PairTerms), PME and constants.
struct NeighborNonbondedSpec {
  at::Tensor charges, scaled_charges, half_sigma, epsilon_root2;  // (N,): e; f^1/2 q, sigma / 2, 2 eps^1/2
  double cutoff = 1.0, skin = 0.1, switch_distance = -1.0;       // nm (switch < 0: none)
  int64_t kind = 0;                                               // kPlain (cutoff), kReactionField, kEwald
  double alpha = 0.0, krf = 0.0, crf = 0.0;
  at::Tensor exclusion_starts, exclusion_partners;                // excluded partners j > i of each atom i
  std::shared_ptr<ForceTerm> exceptions, exclusions;              // or null
  std::vector<int64_t> pme_grid;                                  // empty: no reciprocal sum
  int64_t pme_order = 5;
  std::vector<at::Tensor> pme_moduli;                             // |b(m)|^2 along each axis, double
  double constant = 0.0;    // kJ/mol (PME self energy)
  double background = 0.0;  // kJ/mol nm^3: a net charge's neutralising background, E = background / V
  double dispersion = 0.0;  // kJ/mol nm^3: the long-range dispersion correction, E = dispersion / V
};

class NeighborNonbondedTerm : public ForceTerm {
 public:
  explicit NeighborNonbondedTerm(NeighborNonbondedSpec spec);
  double add_forces(const at::Tensor& positions, const at::Tensor& box, at::Tensor& forces) override;
  // the positions and box of the last build (what fixes the list, as NeighborList.state_dict), or empty
  std::vector<at::Tensor> reference() const;
  void set_reference(const at::Tensor& positions, std::optional<at::Tensor> box);
  int64_t builds() const { return builds_; }
  double cutoff() const { return spec_.cutoff; }

 private:
  bool needs_rebuild(const at::Tensor& positions, const at::Tensor& box) const;
  void build(const at::Tensor& positions, const at::Tensor& box);
  void update_influence(const at::Tensor& box, at::ScalarType type);
  double add_pme(const at::Tensor& positions, const at::Tensor& box, at::Tensor& forces);

  NeighborNonbondedSpec spec_;
  at::Tensor reference_, reference_box_, atom_parameters_, pme_charges_, influence_, influence_box_;
  std::vector<at::Tensor> clusters_;
  double force_transform_[9] = {0};
  int64_t builds_ = 0;
};

// Pair energies given by a lowered expression of r (expression_term.cpp, mindsponge.forcefield.expressions.program):
// over fixed pairs (cutoff <= 0), or over candidate pairs with a cutoff and a Verlet list of its own.
struct ExpressionPairSpec {
  at::Tensor code, values;             // (I, 5) long: opcode, destination, operands; (I,) double constants
  int64_t registers = 0, result = 0;   // registers used; the one holding the energy
  at::Tensor first, second;            // (P,) long: the pairs, or the candidates with a cutoff
  at::Tensor pair_table, particle_table;  // (P, Kp) per-pair and (N, Ka) per-atom input columns
  at::Tensor weights;                  // (P,) multiplicity of each pair, or undefined (1)
  double cutoff = 0.0, skin = 0.1, switch_distance = -1.0;  // nm (cutoff <= 0: none; switch < 0: none)
  bool periodic = false;               // minimum-image differences in the box
  double long_range = 0.0;             // kJ/mol nm^3: E += long_range / V (periodic)
};

class ExpressionPairTerm : public ForceTerm {
 public:
  explicit ExpressionPairTerm(ExpressionPairSpec spec);
  double add_forces(const at::Tensor& positions, const at::Tensor& box, at::Tensor& forces) override;
  int64_t builds() const { return builds_; }

 private:
  void image(const double* box, double* d) const;
  template <typename T>
  void build(const T* x, const double* box, int64_t n_atoms);
  template <typename T>
  bool moved(const T* x, int64_t n_atoms) const;
  void run(const int64_t* pairs, int64_t count, const double* distance, double* energy, double* derivative);

  ExpressionPairSpec spec_;
  std::vector<bool> dynamic_;    // per instruction: whether its value depends on r
  std::vector<int64_t> listed_;  // the pairs within cutoff + skin at the last build (all without a cutoff)
  std::vector<double> reference_, value_, gradient_;
  int64_t builds_ = 0;
};

// A term computed elsewhere (Python): callback(positions, box) -> (energy () tensor, forces (N, 3) tensor).
using ForceCallback =
    std::function<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const std::optional<at::Tensor>&)>;

class CallbackTerm : public ForceTerm {
 public:
  explicit CallbackTerm(ForceCallback callback) : callback_(std::move(callback)) {}
  double add_forces(const at::Tensor& positions, const at::Tensor& box, at::Tensor& forces) override;

 private:
  ForceCallback callback_;
};

// --- the step loop (dynamics.cpp) ----------------------------------------------------------------------

// The potential as the step loop sees it: terms evaluated in the compute type on positions whose virtual
// sites are placed from their parents, the sites' forces carried over to the parents.
class ForceProgram {
 public:
  ForceProgram(std::vector<std::shared_ptr<ForceTerm>> terms, at::ScalarType compute, at::Tensor sites,
               at::Tensor parents, at::Tensor weights, at::Tensor cross_weights);
  // energy (kJ/mol) and forces (N, 3) in the type of positions
  std::tuple<double, at::Tensor> evaluate(const at::Tensor& positions, const at::Tensor& box);
  // positions with every virtual site placed from its parents (in the type of positions)
  at::Tensor place_sites(const at::Tensor& positions) const;

 private:
  std::vector<std::shared_ptr<ForceTerm>> terms_;
  at::ScalarType compute_;
  at::Tensor sites_, parents_, weights_, cross_weights_;  // (S,), (S, 3), (S, 3) and (S,), double
};

// Constraints applied in order: SETTLE waters, then SHAKE/RATTLE pairs (mindsponge.constraints).
struct ConstraintSpec {
  at::Tensor settle_atoms, settle_oh, settle_hh;            // (W, 3) long, (W,), (W,)
  at::Tensor pairs, distances;                              // (C, 2) long, (C,)
  double tolerance = 1e-5;
  int64_t max_iterations = 1000;
};

// Integrator and thermostat of mindsponge.integrators / mindsponge.thermostats.
struct IntegratorSpec {
  int64_t kind = 0;                // 0 velocity Verlet, 1 Langevin BAOAB (LangevinMiddle)
  double dt = 0.0;                 // ps
  double decay = 0.0, thermal = 0.0;  // Langevin: v <- decay v + thermal sqrt(1/m) noise
  at::Tensor thermal_per_atom;     // optional (N,): a temperature per atom (replicas as copies)
  int64_t thermostat = 0;          // velocity Verlet: 0 none, 1 Bussi, 2 Berendsen, 3 Nose-Hoover chain
  double temperature = 0.0, time_constant = 0.0;  // K, ps
  int64_t chain_length = 0;
};

class Dynamics {
 public:
  Dynamics(std::shared_ptr<ForceProgram> forces, at::Tensor masses, IntegratorSpec integrator,
           ConstraintSpec constraints, bool remove_center_of_mass_motion, int64_t degrees_of_freedom,
           at::Generator generator);

  void set_state(at::Tensor positions, at::Tensor velocities, std::optional<at::Tensor> box, at::Tensor forces,
                 double energy, int64_t step, double time, std::optional<at::Tensor> rng_state,
                 std::vector<at::Tensor> chain);
  // Integrates up to steps steps, stopping early after seconds of wall time (if > 0). Returns
  // (steps taken, status, message): status 0 ran, 1 the energy or a position became non-finite or the energy
  // jumped by more than max_energy_jump (kJ/mol), 2 a constraint failed. The state is always the last good
  // one; an exception from a callback term leaves it at the last good step too.
  std::tuple<int64_t, int64_t, std::string> run(int64_t steps, double max_energy_jump, double seconds);

  at::Tensor positions() const { return positions_.clone(); }
  at::Tensor velocities() const { return velocities_.clone(); }
  at::Tensor forces() const { return forces_.clone(); }
  double energy() const { return energy_; }
  int64_t step() const { return step_; }
  double time() const { return time_; }
  std::optional<at::Tensor> rng_state() const;
  std::vector<at::Tensor> chain() const;

 private:
  template <typename A>
  std::tuple<int64_t, std::string> advance(double max_energy_jump);

  std::shared_ptr<ForceProgram> forces_program_;
  at::Tensor masses_, inverse_masses_, noise_scale_;
  IntegratorSpec integrator_;
  ConstraintSpec constraints_;
  bool remove_com_;
  int64_t dof_;
  at::Generator generator_;
  bool stochastic_;
  // the state
  at::Tensor positions_, velocities_, forces_, box_;
  double energy_ = 0.0, time_ = 0.0;
  int64_t step_ = 0;
  std::vector<double> chain_positions_, chain_velocities_;
};

// --- kernels bound to Python --------------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor> bond_forces(at::Tensor positions, at::Tensor atoms, at::Tensor length,
                                               at::Tensor k);
std::tuple<at::Tensor, at::Tensor> angle_forces(at::Tensor positions, at::Tensor atoms, at::Tensor angle,
                                                at::Tensor k);
std::tuple<at::Tensor, at::Tensor> torsion_forces(at::Tensor positions, at::Tensor atoms, at::Tensor periodicity,
                                                  at::Tensor phase, at::Tensor k);
std::tuple<at::Tensor, at::Tensor> improper_forces(at::Tensor positions, at::Tensor atoms, at::Tensor angle,
                                                   at::Tensor k, double period);

std::tuple<at::Tensor, int64_t> settle_positions(at::Tensor reference, at::Tensor positions, at::Tensor atoms,
                                                 at::Tensor masses, at::Tensor oh_distance, at::Tensor hh_distance);
at::Tensor settle_velocities(at::Tensor positions, at::Tensor velocities, at::Tensor atoms, at::Tensor masses);
std::tuple<at::Tensor, int64_t> shake_positions(at::Tensor reference, at::Tensor positions, at::Tensor pairs,
                                                at::Tensor distances, at::Tensor inverse_masses, double tolerance,
                                                int64_t max_iterations);
std::tuple<at::Tensor, int64_t> rattle_velocities(at::Tensor positions, at::Tensor velocities, at::Tensor pairs,
                                                  at::Tensor inverse_masses, double tolerance,
                                                  int64_t max_iterations);

std::vector<at::Tensor> pair_forces(at::Tensor positions, at::Tensor first, at::Tensor second, at::Tensor shifts,
                                    at::Tensor charge_products, at::Tensor sigma_squared, at::Tensor epsilon4,
                                    double cutoff, double switch_distance, int64_t kind, double alpha, double krf,
                                    double crf);
std::vector<at::Tensor> cell_neighbors(at::Tensor wrapped, at::Tensor box, at::Tensor cell_xyz,
                                       std::vector<int64_t> n_cells, std::vector<int64_t> reach,
                                       double list_cutoff, at::Tensor exclusion_starts,
                                       at::Tensor exclusion_partners, bool deduplicate);
at::Tensor rows_to_pairs(at::Tensor starts, at::Tensor partners);
std::vector<at::Tensor> cluster_forces(at::Tensor positions, at::Tensor box, at::Tensor reference,
                                       at::Tensor slot_atoms, at::Tensor slot_shifts, at::Tensor pair_starts,
                                       at::Tensor pair_clusters, at::Tensor pair_shifts, at::Tensor pair_masks,
                                       at::Tensor scaled_charges, at::Tensor half_sigma, at::Tensor epsilon_root2,
                                       double cutoff, double switch_distance, int64_t kind, double alpha,
                                       double krf, double crf, bool combined);
std::vector<at::Tensor> cluster_pairs(at::Tensor positions, at::Tensor box, double list_cutoff,
                                      at::Tensor exclusion_starts, at::Tensor exclusion_partners);
std::vector<at::Tensor> prepare_pairs(at::Tensor pairs, at::Tensor reference, at::Tensor box, at::Tensor charges,
                                      at::Tensor sigma, at::Tensor epsilon, double coulomb_constant);
at::Tensor pme_spread(at::Tensor scaled, at::Tensor charges, std::vector<int64_t> sizes, int64_t order);
at::Tensor pme_gather(at::Tensor potential, at::Tensor scaled, at::Tensor charges, std::vector<int64_t> sizes,
                      int64_t order);

}  // namespace mindsponge_kernels
