// The non-bonded force of mindsponge.forcefield.nonbonded.Nonbonded with a cutoff, as one term of the step
// loop (dynamics.cpp): the cluster-pair neighbour list of mindsponge.neighbors.NeighborList, rebuilt when an
// atom has moved more than half the skin or the box changed (cluster_search.cpp), the direct sum over it
// (cluster_forces.cpp), the exceptions and the Ewald exclusion corrections (PairTerm), PME (pme.cpp and torch's
// FFT, with the influence function of mindsponge.forcefield.ewald.PMEReciprocal recomputed when the box
// changes), the self, neutralising-background and dispersion-correction energies. The same operations as the
// Python path with the compiled backend, without the Python between them.
#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "kernels.h"

namespace mindsponge_kernels {

NeighborNonbondedTerm::NeighborNonbondedTerm(NeighborNonbondedSpec spec) : spec_(std::move(spec)) {
  TORCH_CHECK(spec_.kind == kPlain || spec_.kind == kReactionField || spec_.kind == kEwald,
              "NeighborNonbondedTerm: kind must be cutoff, reaction field or PME");
  spec_.exclusion_starts = spec_.exclusion_starts.to(at::kLong).contiguous();
  spec_.exclusion_partners = spec_.exclusion_partners.to(at::kLong).contiguous();
  if (!spec_.pme_grid.empty()) {
    TORCH_CHECK(spec_.pme_grid.size() == 3, "NeighborNonbondedTerm: pme_grid must hold three sizes");
    for (auto& moduli : spec_.pme_moduli) moduli = moduli.to(at::kDouble).contiguous();
  }
}

namespace {

// minimum-image displacement (mindsponge.space.minimum_image, reduced box, axes 2, 1, 0), squared length
template <typename T>
T squared_displacement(const T* a, const T* b, const T* box) {
  T d[3] = {a[0] - b[0], a[1] - b[1], a[2] - b[2]};
  if (box != nullptr)
    for (int axis = 2; axis >= 0; --axis) {
      const T image = std::nearbyint(d[axis] / box[4 * axis]);
      for (int k = 0; k < 3; ++k) d[k] -= image * box[3 * axis + k];
    }
  return d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
}

std::array<double, 3> box_diagonal(const at::Tensor& box) {
  std::array<double, 3> diagonal{};
  AT_DISPATCH_FLOATING_TYPES(box.scalar_type(), "box_diagonal", [&] {
    const scalar_t* b = box.data_ptr<scalar_t>();
    diagonal = {double(b[0]), double(b[4]), double(b[8])};
  });
  return diagonal;
}

}  // namespace

bool NeighborNonbondedTerm::needs_rebuild(const at::Tensor& positions, const at::Tensor& box) const {
  if (!reference_.defined() || reference_.sizes() != positions.sizes() ||
      reference_.scalar_type() != positions.scalar_type())
    return true;
  if (box.defined() != reference_box_.defined()) return true;
  if (box.defined() && !at::equal(box, reference_box_)) return true;
  bool moved = false;
  const double limit = 0.5 * spec_.skin;
  AT_DISPATCH_FLOATING_TYPES(positions.scalar_type(), "needs_rebuild", [&] {
    const scalar_t* x = positions.data_ptr<scalar_t>();
    const scalar_t* r = reference_.data_ptr<scalar_t>();
    const scalar_t* b = box.defined() ? box.data_ptr<scalar_t>() : nullptr;
    const scalar_t squared_limit = scalar_t(limit * limit);
    for (int64_t atom = 0; atom < positions.size(0) && !moved; ++atom)
      moved = squared_displacement(x + 3 * atom, r + 3 * atom, b) > squared_limit;
  });
  return moved;
}

void NeighborNonbondedTerm::build(const at::Tensor& positions, const at::Tensor& box) {
  if (box.defined()) {
    const auto diagonal = box_diagonal(box);
    const double half_width = 0.5 * std::min({diagonal[0], diagonal[1], diagonal[2]});
    TORCH_CHECK(spec_.cutoff <= half_width + 1e-12, "BoxTooSmall: the cutoff ", spec_.cutoff,
                " nm is longer than half the box (", half_width, " nm)");
  }
  reference_ = positions.clone();
  reference_box_ = box.defined() ? box.clone() : at::Tensor();
  clusters_ = cluster_pairs(reference_, box.defined() ? reference_box_ : at::empty({0}, positions.options()),
                            spec_.cutoff + spec_.skin, spec_.exclusion_starts, spec_.exclusion_partners);
  builds_ += 1;
}

void NeighborNonbondedTerm::set_reference(const at::Tensor& positions, std::optional<at::Tensor> box) {
  build(positions.contiguous(), box.has_value() ? box->contiguous() : at::Tensor());
}

std::vector<at::Tensor> NeighborNonbondedTerm::reference() const {
  if (!reference_.defined()) return {};
  if (!reference_box_.defined()) return {reference_};
  return {reference_, reference_box_};
}

void NeighborNonbondedTerm::update_influence(const at::Tensor& box, at::ScalarType type) {
  // PMEReciprocal.influence, in double: n_x n_y n_z f exp(-(pi/alpha)^2 m*^2) / (pi V m*^2 |b|^2), m* = R m
  auto box_d = box.to(at::kDouble).contiguous();
  const double* b = box_d.data_ptr<double>();
  // the inverse of a lower-triangular box
  double recip[9] = {0};
  recip[0] = 1.0 / b[0];
  recip[4] = 1.0 / b[4];
  recip[8] = 1.0 / b[8];
  recip[3] = -b[3] * recip[0] * recip[4];
  recip[7] = -b[7] * recip[4] * recip[8];
  recip[6] = (b[3] * b[7] - b[4] * b[6]) * recip[0] * recip[4] * recip[8];
  const int64_t nx = spec_.pme_grid[0], ny = spec_.pme_grid[1], nz = spec_.pme_grid[2], half = nz / 2 + 1;
  const double volume = b[0] * b[4] * b[8];
  const double* moduli_x = spec_.pme_moduli[0].data_ptr<double>();
  const double* moduli_y = spec_.pme_moduli[1].data_ptr<double>();
  const double* moduli_z = spec_.pme_moduli[2].data_ptr<double>();
  auto influence = at::empty({nx, ny, half}, at::TensorOptions().dtype(at::kDouble));
  double* values = influence.data_ptr<double>();
  const double exponent = -(M_PI / spec_.alpha) * (M_PI / spec_.alpha);
  auto frequency = [](int64_t k, int64_t n) { return double(k < (n + 1) / 2 ? k : k - n); };
  for (int64_t i = 0; i < nx; ++i)
    for (int64_t j = 0; j < ny; ++j)
      for (int64_t k = 0; k < half; ++k) {
        const double m[3] = {frequency(i, nx), frequency(j, ny), frequency(k, nz)};
        double m2 = 0.0;
        for (int a = 0; a < 3; ++a) {
          const double component = m[0] * recip[3 * a] + m[1] * recip[3 * a + 1] + m[2] * recip[3 * a + 2];
          m2 += component * component;
        }
        const double denominator = M_PI * volume * m2 * moduli_x[i] * moduli_y[j] * moduli_z[k];
        values[(i * ny + j) * half + k] =
            (i == 0 && j == 0 && k == 0) ? 0.0 : kCoulomb * std::exp(exponent * m2) / denominator * double(nx * ny * nz);
      }
  influence_ = influence.to(type);
  // forces = (q dphi/du) @ (-diag(n) R^T)
  const int64_t sizes[3] = {nx, ny, nz};
  for (int a = 0; a < 3; ++a)
    for (int c = 0; c < 3; ++c) force_transform_[3 * a + c] = -double(sizes[a]) * recip[3 * c + a];
  influence_box_ = box.clone();
}

double NeighborNonbondedTerm::add_pme(const at::Tensor& positions, const at::Tensor& box, at::Tensor& forces) {
  const auto type = positions.scalar_type();
  if (!influence_.defined() || influence_.scalar_type() != type || !at::equal(influence_box_, box))
    update_influence(box, type);
  if (!pme_charges_.defined() || pme_charges_.scalar_type() != type) pme_charges_ = spec_.charges.to(type).contiguous();
  const int64_t n_atoms = positions.size(0);
  auto scaled = at::empty_like(positions);
  AT_DISPATCH_FLOATING_TYPES(type, "pme_scaled", [&] {  // mindsponge.space.fractional, wrapped, times n
    const scalar_t* x = positions.data_ptr<scalar_t>();
    const scalar_t* b = box.data_ptr<scalar_t>();
    scalar_t* u = scaled.data_ptr<scalar_t>();
    const scalar_t n[3] = {scalar_t(spec_.pme_grid[0]), scalar_t(spec_.pme_grid[1]), scalar_t(spec_.pme_grid[2])};
    for (int64_t atom = 0; atom < n_atoms; ++atom) {
      const scalar_t* p = x + 3 * atom;
      const scalar_t s_z = p[2] / b[8];
      const scalar_t s_y = (p[1] - s_z * b[7]) / b[4];
      const scalar_t s_x = (p[0] - s_y * b[3] - s_z * b[6]) / b[0];
      const scalar_t s[3] = {s_x, s_y, s_z};
      for (int d = 0; d < 3; ++d) u[3 * atom + d] = (s[d] - std::floor(s[d])) * n[d];
    }
  });
  auto grid = pme_spread(scaled, pme_charges_, spec_.pme_grid, spec_.pme_order);
  auto potential = at::fft_irfftn(at::fft_rfftn(grid) * influence_, spec_.pme_grid).contiguous();
  auto gradient = pme_gather(potential, scaled, pme_charges_, spec_.pme_grid, spec_.pme_order);
  double energy = 0.0;
  AT_DISPATCH_FLOATING_TYPES(type, "pme_forces", [&] {
    const scalar_t* q = grid.data_ptr<scalar_t>();
    const scalar_t* phi = potential.data_ptr<scalar_t>();
    for (int64_t k = 0; k < grid.numel(); ++k) energy += double(q[k]) * double(phi[k]);
    const scalar_t* g = gradient.data_ptr<scalar_t>();
    scalar_t* f = forces.data_ptr<scalar_t>();
    scalar_t transform[9];
    for (int k = 0; k < 9; ++k) transform[k] = scalar_t(force_transform_[k]);
    for (int64_t atom = 0; atom < n_atoms; ++atom)
      for (int c = 0; c < 3; ++c)
        f[3 * atom + c] += g[3 * atom] * transform[c] + g[3 * atom + 1] * transform[3 + c] +
                           g[3 * atom + 2] * transform[6 + c];
  });
  return 0.5 * energy;
}

double NeighborNonbondedTerm::add_forces(const at::Tensor& positions, const at::Tensor& box, at::Tensor& forces) {
  const auto type = positions.scalar_type();
  if (needs_rebuild(positions, box)) build(positions, box);
  if (!atom_parameters_.defined() || atom_parameters_.scalar_type() != type)
    atom_parameters_ = at::stack({spec_.scaled_charges, spec_.half_sigma, spec_.epsilon_root2}).to(type).contiguous();
  auto direct = cluster_forces(positions, box.defined() ? box : at::empty({0}, positions.options()), reference_,
                               clusters_[0], clusters_[1], clusters_[2], clusters_[3], clusters_[4], clusters_[5],
                               atom_parameters_[0], atom_parameters_[1], atom_parameters_[2], spec_.cutoff,
                               spec_.switch_distance, spec_.kind, spec_.alpha, spec_.krf, spec_.crf, true);
  forces.sub_(direct[1][0]);
  double energy = direct[0].sum().item<double>();
  if (spec_.exceptions) energy += spec_.exceptions->add_forces(positions, box, forces);
  if (spec_.exclusions) energy += spec_.exclusions->add_forces(positions, box, forces);
  if (!spec_.pme_grid.empty()) energy += add_pme(positions, box, forces);
  if (box.defined()) {
    const auto diagonal = box_diagonal(box);
    const double volume = diagonal[0] * diagonal[1] * diagonal[2];
    energy += spec_.background / volume + spec_.dispersion / volume;
  }
  return energy + spec_.constant;
}

}  // namespace mindsponge_kernels
