// The step loop of mindsponge.simulation without Python: many steps per call, as OpenMM's Simulation.step runs
// to the next report. One step is the integrator of mindsponge.integrators (velocity Verlet with a thermostat
// split around it, or Langevin BAOAB), the constraints of mindsponge.constraints (SETTLE, SHAKE/RATTLE through
// the kernels of constraints.cpp), the force program (compiled terms, and Python terms called back), the
// virtual sites, the removal of the centre-of-mass motion, and the stability check of
// mindsponge.simulation.Simulation. The arithmetic repeats the torch code of those modules operation by
// operation in the integration type A (float or double), so that both paths agree to round-off; the pragma keeps
// the compiler from fusing them into multiply-adds that the torch code does not make.
#pragma GCC optimize("fp-contract=off")

#include <ATen/ATen.h>

#include <chrono>
#include <cmath>
#include <sstream>

#include "kernels.h"

namespace mindsponge_kernels {

double CallbackTerm::add_forces(const at::Tensor& positions, const at::Tensor& box, at::Tensor& forces) {
  std::optional<at::Tensor> periodic;
  if (box.defined()) periodic = box;
  auto [energy, term_forces] = callback_(positions, periodic);
  TORCH_CHECK(term_forces.sizes() == forces.sizes(), "a force term returned forces of shape ",
              term_forces.sizes(), " for positions of shape ", forces.sizes());
  forces.add_(term_forces.to(forces.scalar_type()));
  return energy.item<double>();
}

// --- forces ------------------------------------------------------------------------------------------

ForceProgram::ForceProgram(std::vector<std::shared_ptr<ForceTerm>> terms, at::ScalarType compute, at::Tensor sites,
                           at::Tensor parents, at::Tensor weights, at::Tensor cross_weights)
    : terms_(std::move(terms)),
      compute_(compute),
      sites_(sites.to(at::kLong).contiguous()),
      parents_(parents.to(at::kLong).contiguous()),
      weights_(weights.to(at::kDouble).contiguous()),
      cross_weights_(cross_weights.to(at::kDouble).contiguous()) {}

namespace {

template <typename T>
void place_sites_impl(T* x, const int64_t* sites, const int64_t* parents, const double* weights,
                      const double* cross_weights, int64_t n_sites) {
  // mindsponge.forcefield.base.VirtualSites: w0 x0 + w1 x1 + w2 x2 + w_cross (x1 - x0) x (x2 - x0)
  for (int64_t s = 0; s < n_sites; ++s) {
    const T* p0 = x + 3 * parents[3 * s];
    const T* p1 = x + 3 * parents[3 * s + 1];
    const T* p2 = x + 3 * parents[3 * s + 2];
    const T w0 = T(weights[3 * s]), w1 = T(weights[3 * s + 1]), w2 = T(weights[3 * s + 2]);
    const T wc = T(cross_weights[s]);
    T a[3], b[3];
    for (int d = 0; d < 3; ++d) {
      a[d] = p1[d] - p0[d];
      b[d] = p2[d] - p0[d];
    }
    const T cross[3] = {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
    T placed[3];
    for (int d = 0; d < 3; ++d) placed[d] = w0 * p0[d] + w1 * p1[d] + w2 * p2[d] + wc * cross[d];
    for (int d = 0; d < 3; ++d) x[3 * sites[s] + d] = placed[d];
  }
}

// the forces on the sites carried over to their parents (the transpose of the placement), sites left at zero
template <typename T>
void spread_site_forces(const T* x, T* f, const int64_t* sites, const int64_t* parents, const double* weights,
                        const double* cross_weights, int64_t n_sites) {
  for (int64_t s = 0; s < n_sites; ++s) {
    const int64_t i0 = parents[3 * s], i1 = parents[3 * s + 1], i2 = parents[3 * s + 2];
    T* fs = f + 3 * sites[s];
    const T force[3] = {fs[0], fs[1], fs[2]};
    fs[0] = fs[1] = fs[2] = T(0);
    const T w0 = T(weights[3 * s]), w1 = T(weights[3 * s + 1]), w2 = T(weights[3 * s + 2]);
    const T wc = T(cross_weights[s]);
    T a[3], b[3];
    for (int d = 0; d < 3; ++d) {
      a[d] = x[3 * i1 + d] - x[3 * i0 + d];
      b[d] = x[3 * i2 + d] - x[3 * i0 + d];
    }
    // d(a x b) carries F . (da x b) = da . (b x F) to atom 1 and F . (a x db) = db . (F x a) to atom 2
    const T b_cross_f[3] = {b[1] * force[2] - b[2] * force[1], b[2] * force[0] - b[0] * force[2],
                            b[0] * force[1] - b[1] * force[0]};
    const T f_cross_a[3] = {force[1] * a[2] - force[2] * a[1], force[2] * a[0] - force[0] * a[2],
                            force[0] * a[1] - force[1] * a[0]};
    for (int d = 0; d < 3; ++d) {
      const T to1 = wc * b_cross_f[d], to2 = wc * f_cross_a[d];
      f[3 * i0 + d] += w0 * force[d] - to1 - to2;
      f[3 * i1 + d] += w1 * force[d] + to1;
      f[3 * i2 + d] += w2 * force[d] + to2;
    }
  }
}

}  // namespace

at::Tensor ForceProgram::place_sites(const at::Tensor& positions) const {
  const int64_t n_sites = sites_.size(0);
  if (n_sites == 0) return positions;
  auto placed = positions.contiguous().clone();
  AT_DISPATCH_FLOATING_TYPES(placed.scalar_type(), "place_sites", [&] {
    place_sites_impl(placed.data_ptr<scalar_t>(), sites_.data_ptr<int64_t>(), parents_.data_ptr<int64_t>(),
                     weights_.data_ptr<double>(), cross_weights_.data_ptr<double>(), n_sites);
  });
  return placed;
}

std::tuple<double, at::Tensor> ForceProgram::evaluate(const at::Tensor& positions, const at::Tensor& box) {
  at::Tensor x = positions.to(compute_).contiguous();
  const int64_t n_sites = sites_.size(0);
  if (n_sites > 0) x = place_sites(x);
  at::Tensor periodic;
  if (box.defined()) periodic = box.to(compute_).contiguous();
  auto forces = at::zeros_like(x);
  double energy = 0.0;
  for (auto& term : terms_) energy += term->add_forces(x, periodic, forces);
  if (n_sites > 0) {
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "spread_site_forces", [&] {
      spread_site_forces(x.data_ptr<scalar_t>(), forces.data_ptr<scalar_t>(), sites_.data_ptr<int64_t>(),
                         parents_.data_ptr<int64_t>(), weights_.data_ptr<double>(),
                         cross_weights_.data_ptr<double>(), n_sites);
    });
  }
  return {energy, forces.to(positions.scalar_type())};
}

// --- dynamics ----------------------------------------------------------------------------------------

Dynamics::Dynamics(std::shared_ptr<ForceProgram> forces, at::Tensor masses, IntegratorSpec integrator,
                   ConstraintSpec constraints, bool remove_center_of_mass_motion, int64_t degrees_of_freedom,
                   at::Generator generator)
    : forces_program_(std::move(forces)),
      integrator_(integrator),
      constraints_(constraints),
      remove_com_(remove_center_of_mass_motion),
      dof_(degrees_of_freedom),
      generator_(std::move(generator)) {
  masses_ = masses.contiguous();
  // mindsponge.integrators._inverse_masses: 0 for massless particles
  auto massive = masses_ > 0;
  inverse_masses_ = at::where(massive, 1.0 / at::where(massive, masses_, at::ones_like(masses_)),
                              at::zeros_like(masses_)).contiguous();
  stochastic_ = integrator_.kind == 1 || integrator_.thermostat == 1;
  if (integrator_.kind == 1) {
    auto thermal = integrator_.thermal_per_atom.defined()
                       ? integrator_.thermal_per_atom.to(masses_.scalar_type())
                       : at::full_like(masses_, integrator_.thermal);
    noise_scale_ = (thermal * at::sqrt(inverse_masses_)).contiguous();
  }
  if (integrator_.thermostat == 3) {
    chain_positions_.assign(integrator_.chain_length, 0.0);
    chain_velocities_.assign(integrator_.chain_length, 0.0);
  }
}

void Dynamics::set_state(at::Tensor positions, at::Tensor velocities, std::optional<at::Tensor> box,
                         at::Tensor forces, double energy, int64_t step, double time,
                         std::optional<at::Tensor> rng_state, std::vector<at::Tensor> chain) {
  const auto type = masses_.scalar_type();
  TORCH_CHECK(positions.scalar_type() == type && velocities.scalar_type() == type,
              "Dynamics: positions and velocities must be in the type of the masses");
  positions_ = positions.contiguous().clone();
  velocities_ = velocities.contiguous().clone();
  forces_ = forces.to(type).contiguous().clone();
  box_ = box.has_value() ? box->to(type).contiguous().clone() : at::Tensor();
  energy_ = energy;
  step_ = step;
  time_ = time;
  if (rng_state.has_value()) generator_.set_state(*rng_state);
  if (integrator_.thermostat == 3 && chain.size() == 2) {
    auto chain_x = chain[0].to(at::kDouble).contiguous(), chain_v = chain[1].to(at::kDouble).contiguous();
    chain_positions_.assign(chain_x.data_ptr<double>(), chain_x.data_ptr<double>() + chain_x.numel());
    chain_velocities_.assign(chain_v.data_ptr<double>(), chain_v.data_ptr<double>() + chain_v.numel());
  }
}

std::optional<at::Tensor> Dynamics::rng_state() const {
  if (!stochastic_) return std::nullopt;
  return generator_.get_state();
}

std::vector<at::Tensor> Dynamics::chain() const {
  if (integrator_.thermostat != 3) return {};
  auto options = at::TensorOptions().dtype(masses_.scalar_type());
  auto x = at::tensor(chain_positions_, at::TensorOptions().dtype(at::kDouble)).to(options.dtype());
  auto v = at::tensor(chain_velocities_, at::TensorOptions().dtype(at::kDouble)).to(options.dtype());
  return {x, v};
}

namespace {

constexpr double kBoltzmann = 0.00831446261815324;  // kJ/mol/K (common.units.BOLTZMANN_MD)

template <typename A>
double kinetic_energy(const A* v, const A* m, int64_t n) {
  // mindsponge.thermo.kinetic_energy: 0.5 * sum m |v|^2
  A total = A(0);
  for (int64_t i = 0; i < n; ++i) total += m[i] * (v[3 * i] * v[3 * i] + v[3 * i + 1] * v[3 * i + 1] + v[3 * i + 2] * v[3 * i + 2]);
  return double(A(0.5) * total);
}

template <typename A>
void scale(A* v, int64_t n, A factor) {
  for (int64_t k = 0; k < 3 * n; ++k) v[k] = v[k] * factor;
}

// What the step of a constraint kernel says when it fails.
struct ConstraintFailure {
  std::string message;
};

}  // namespace

template <typename A>
std::tuple<int64_t, std::string> Dynamics::advance(double max_energy_jump) {
  const int64_t n = positions_.size(0);
  const A dt = A(integrator_.dt);
  const A* inverse = inverse_masses_.data_ptr<A>();
  const A* m = masses_.data_ptr<A>();
  const bool constrained = constraints_.settle_atoms.defined() || constraints_.pairs.defined();

  auto constrain_positions = [&](const at::Tensor& reference, at::Tensor moved) -> at::Tensor {
    if (constraints_.settle_atoms.defined() && constraints_.settle_atoms.size(0) > 0) {
      auto [placed, failed] = settle_positions(reference, moved, constraints_.settle_atoms, masses_,
                                               constraints_.settle_oh, constraints_.settle_hh);
      if (failed >= 0) {
        std::ostringstream text;
        text << "SETTLE failed for the water with oxygen atom "
             << constraints_.settle_atoms[failed][0].item<int64_t>()
             << ": the molecule moved too far in one step (time step too long or forces too large)";
        throw ConstraintFailure{text.str()};
      }
      moved = placed;
    }
    if (constraints_.pairs.defined() && constraints_.pairs.size(0) > 0) {
      auto [shaken, used] = shake_positions(reference, moved, constraints_.pairs, constraints_.distances,
                                            inverse_masses_, constraints_.tolerance, constraints_.max_iterations);
      if (used < 0) {
        auto bond = shaken.index_select(0, constraints_.pairs.select(1, 1)) -
                    shaken.index_select(0, constraints_.pairs.select(1, 0));
        auto error = (at::linalg_vector_norm(bond, 2, {-1}) - constraints_.distances.to(bond.scalar_type())).abs();
        const int64_t worst = error.argmax().item<int64_t>();
        std::ostringstream text;
        text << "SHAKE did not converge in " << constraints_.max_iterations
             << " iterations; worst constraint is atoms (" << constraints_.pairs[worst][0].item<int64_t>() << ", "
             << constraints_.pairs[worst][1].item<int64_t>() << "), off by " << error[worst].item<double>()
             << " nm (time step too long or forces too large)";
        throw ConstraintFailure{text.str()};
      }
      if (used > 0) moved = shaken;
    }
    return moved;
  };
  auto constrain_velocities = [&](const at::Tensor& x, at::Tensor v) -> at::Tensor {
    if (constraints_.settle_atoms.defined() && constraints_.settle_atoms.size(0) > 0)
      v = settle_velocities(x, v, constraints_.settle_atoms, masses_);
    if (constraints_.pairs.defined() && constraints_.pairs.size(0) > 0) {
      auto [rattled, used] = rattle_velocities(x, v, constraints_.pairs, inverse_masses_, constraints_.tolerance,
                                               constraints_.max_iterations);
      if (used < 0) {
        std::ostringstream text;
        text << "RATTLE did not converge in " << constraints_.max_iterations
             << " iterations (time step too long or forces too large)";
        throw ConstraintFailure{text.str()};
      }
      if (used > 0) v = rattled;
    }
    return v;
  };

  auto thermostat = [&](A* v, double h) {  // one thermostat step of length h (mindsponge.thermostats)
    if (integrator_.thermostat == 0) return;
    const double kinetic = kinetic_energy(v, m, n);
    const double thermal = kBoltzmann * integrator_.temperature;
    const double dof = double(dof_);
    if (integrator_.thermostat == 1) {  // Bussi
      const double target = 0.5 * dof * thermal;
      const double decay = std::exp(-h / integrator_.time_constant);
      auto normals = at::randn({dof_}, generator_, at::TensorOptions().dtype(masses_.scalar_type()));
      const A* z = normals.data_ptr<A>();
      A rest = A(0);
      for (int64_t k = 1; k < dof_; ++k) rest += z[k] * z[k];
      const double first = double(z[0]);
      const double ratio = target / (dof * kinetic);
      const double scale_squared = decay + (1 - decay) * (double(rest) + first * first) * ratio +
                                   2 * first * std::sqrt(decay * (1 - decay) * ratio);
      const double sign = (first + std::sqrt(decay / ((1 - decay) * ratio))) >= 0 ? 1.0 : -1.0;
      scale(v, n, A(sign * std::sqrt(scale_squared)));
    } else if (integrator_.thermostat == 2) {  // Berendsen
      const double current = 2.0 * kinetic / (dof * kBoltzmann);
      const double factor = 1 + h / integrator_.time_constant * (integrator_.temperature / current - 1);
      scale(v, n, A(std::sqrt(std::max(factor, 0.0))));
    } else {  // Nose-Hoover chain, Trotter scheme of Martyna et al. (1996) over h
      const int64_t length = integrator_.chain_length, last = length - 1;
      std::vector<double> q(length, thermal * integrator_.time_constant * integrator_.time_constant);
      q[0] *= dof;
      auto& chain = chain_velocities_;
      double kinetic2 = 2.0 * kinetic;
      auto force = [&](int64_t index, double kinetic_twice) {
        if (index == 0) return (kinetic_twice - dof * thermal) / q[0];
        return (q[index - 1] * chain[index - 1] * chain[index - 1] - thermal) / q[index];
      };
      chain[last] += 0.5 * h * force(last, kinetic2);
      for (int64_t k = last - 1; k >= 0; --k) {
        const double damping = std::exp(-0.25 * h * chain[k + 1]);
        chain[k] = (chain[k] * damping + 0.5 * h * force(k, kinetic2)) * damping;
      }
      const double factor = std::exp(-h * chain[0]);
      kinetic2 = kinetic2 * factor * factor;
      for (int64_t k = 0; k < length; ++k) chain_positions_[k] += h * chain[k];
      for (int64_t k = 0; k < last; ++k) {
        const double damping = std::exp(-0.25 * h * chain[k + 1]);
        chain[k] = (chain[k] * damping + 0.5 * h * force(k, kinetic2)) * damping;
      }
      chain[last] += 0.5 * h * force(last, kinetic2);
      scale(v, n, A(factor));
    }
  };

  // the step, on copies: the state is replaced only when the new one is accepted
  const std::vector<double> saved_x = chain_positions_, saved_v = chain_velocities_;
  at::Tensor x = positions_, v = velocities_.clone();
  A* vp = v.data_ptr<A>();
  const A* f = forces_.data_ptr<A>();
  at::Tensor moved = at::empty_like(x);
  A* mp = moved.data_ptr<A>();
  const A* xp = x.data_ptr<A>();
  try {
    if (integrator_.kind == 1) {  // LangevinMiddle: B (full kick), A (half drift), O, A, constrain
      for (int64_t i = 0; i < n; ++i)
        for (int d = 0; d < 3; ++d) vp[3 * i + d] = vp[3 * i + d] + (f[3 * i + d] * dt) * inverse[i];
      if (constrained) {
        v = constrain_velocities(x, v);
        vp = v.data_ptr<A>();
      }
      const A half = A(0.5) * dt;
      for (int64_t k = 0; k < 3 * n; ++k) mp[k] = xp[k] + vp[k] * half;
      auto noise = at::randn({n, 3}, generator_, at::TensorOptions().dtype(at::kFloat));
      const float* z = noise.template data_ptr<float>();
      const A decay = A(integrator_.decay);
      const A* noise_scale = noise_scale_.data_ptr<A>();
      for (int64_t i = 0; i < n; ++i)
        for (int d = 0; d < 3; ++d)
          vp[3 * i + d] = vp[3 * i + d] * decay + A(z[3 * i + d]) * noise_scale[i];
      for (int64_t k = 0; k < 3 * n; ++k) mp[k] = mp[k] + vp[k] * half;
      if (constrained) {
        at::Tensor placed = constrain_positions(x, moved);
        const A* cp = placed.data_ptr<A>();
        // the correction spread over the whole step, then projected (see LangevinMiddle.step)
        for (int64_t k = 0; k < 3 * n; ++k) vp[k] = vp[k] + (cp[k] - mp[k]) / dt;
        moved = placed;
        v = constrain_velocities(moved, v);
        vp = v.data_ptr<A>();
      }
    } else {  // velocity Verlet, the thermostat's half steps around it
      thermostat(vp, 0.5 * integrator_.dt);
      const A half = A(0.5) * dt;
      for (int64_t i = 0; i < n; ++i)
        for (int d = 0; d < 3; ++d) vp[3 * i + d] = vp[3 * i + d] + (f[3 * i + d] * half) * inverse[i];
      for (int64_t k = 0; k < 3 * n; ++k) mp[k] = xp[k] + vp[k] * dt;
      if (constrained) {
        moved = constrain_positions(x, moved);
        const A* cp = moved.data_ptr<A>();
        for (int64_t k = 0; k < 3 * n; ++k) vp[k] = (cp[k] - xp[k]) / dt;
      }
    }
    moved = forces_program_->place_sites(moved);  // massless sites are not moved by the integrator
    auto [energy, new_forces] = forces_program_->evaluate(moved, box_);
    if (integrator_.kind == 0) {
      const A* fp = new_forces.template data_ptr<A>();
      const A half = A(0.5) * dt;
      for (int64_t i = 0; i < n; ++i)
        for (int d = 0; d < 3; ++d) vp[3 * i + d] = vp[3 * i + d] + (fp[3 * i + d] * half) * inverse[i];
      if (constrained) {
        v = constrain_velocities(moved, v);
        vp = v.data_ptr<A>();
      }
      thermostat(vp, 0.5 * integrator_.dt);
    }
    if (remove_com_) {  // mindsponge.thermo.remove_center_of_mass_motion
      A momentum[3] = {0, 0, 0}, total = 0;
      for (int64_t i = 0; i < n; ++i) {
        total += m[i];
        for (int d = 0; d < 3; ++d) momentum[d] += m[i] * vp[3 * i + d];
      }
      for (int d = 0; d < 3; ++d) momentum[d] /= total;
      for (int64_t i = 0; i < n; ++i)
        if (m[i] > 0)
          for (int d = 0; d < 3; ++d) vp[3 * i + d] -= momentum[d];
    }
    // the stability check of Simulation._check_stability
    const A* np = moved.data_ptr<A>();
    A sum = A(0);
    for (int64_t k = 0; k < 3 * n; ++k) sum += np[k];
    bool finite = std::isfinite(energy) && std::isfinite(double(sum));
    if (!finite && std::isfinite(energy)) {
      finite = true;
      for (int64_t k = 0; k < 3 * n; ++k) finite = finite && std::isfinite(double(np[k]));
    }
    if (!finite) {
      chain_positions_ = saved_x;
      chain_velocities_ = saved_v;
      return {1, "the potential energy or a position is not finite"};
    }
    const double jump = std::abs(energy - energy_);
    if (jump > max_energy_jump) {
      chain_positions_ = saved_x;
      chain_velocities_ = saved_v;
      std::ostringstream text;
      text.precision(4);
      text << "the potential energy jumped by " << jump << " kJ/mol (max_energy_jump " << max_energy_jump << ")";
      return {1, text.str()};
    }
    positions_ = moved;
    velocities_ = v;
    forces_ = new_forces;
    energy_ = energy;
    step_ += 1;
    time_ += integrator_.dt;
    return {0, ""};
  } catch (const ConstraintFailure& failure) {
    chain_positions_ = saved_x;
    chain_velocities_ = saved_v;
    return {2, failure.message};
  } catch (...) {
    chain_positions_ = saved_x;
    chain_velocities_ = saved_v;
    throw;
  }
}

std::tuple<int64_t, int64_t, std::string> Dynamics::run(int64_t steps, double max_energy_jump, double seconds) {
  TORCH_CHECK(positions_.defined(), "Dynamics.run: set_state first");
  const auto start = std::chrono::steady_clock::now();
  for (int64_t taken = 0; taken < steps; ++taken) {
    std::tuple<int64_t, std::string> outcome;
    AT_DISPATCH_FLOATING_TYPES(masses_.scalar_type(), "dynamics_step",
                               [&] { outcome = advance<scalar_t>(max_energy_jump); });
    if (std::get<0>(outcome) != 0) return {taken, std::get<0>(outcome), std::get<1>(outcome)};
    if (seconds > 0) {
      const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
      if (elapsed.count() > seconds) return {taken + 1, 0, ""};
    }
  }
  return {steps, 0, ""};
}

}  // namespace mindsponge_kernels
