// Compiled CPU kernels of mindsponge's non-bonded forces (see mindsponge/_kernels/__init__.py): this file
// holds the pair kernel of explicit pairs and the module's bindings; cluster_forces.cpp the cluster-pair
// kernel, cluster_search.cpp its list, cell_search.cpp the cell search and the pair set, pme.cpp PME.
//
// pair_forces : Lennard-Jones + Coulomb energies of a pair list and their position gradients in one pass
// cluster_forces: the same over a cluster-pair list with per-atom parameters (SIMD over clusters of 8 atoms)
// cluster_pairs: the clusters of 8 atoms and their cluster-pair list
// cell_neighbors: half-shell cell-list search of the pairs within the list cutoff, exclusions removed, as
//                compressed rows (rows_to_pairs: the same as (P, 2) pairs i < j); any box valid for the
//                cutoff (the half shell reaches through as many periodic images as needed)
// prepare_pairs: per-pair parameters and minimum-image lattice shifts, LJ pairs first
// pme_spread  : B-spline charge spreading onto the PME grid
// pme_gather  : gradient of the PME energy with respect to the scaled (grid) coordinates
//
// Every kernel is templated on the floating type of the positions (float or double) and
// parallelised with at::parallel_for (thread-local accumulation buffers, reduced at the end),
// so it follows torch.set_num_threads. Energies are accumulated in double.
#include <ATen/ATen.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels.h"

using namespace mindsponge_kernels;

namespace {

// erfc(x) on [0, x_max] by cubic Hermite interpolation of tabulated values and derivatives
// (interpolation error below 1e-12 for 2048 points up to x = 4); entries are {erfc(x_k), h erfc'(x_k)}
template <typename T>
struct ErfcTable {
  static constexpr int64_t kPoints = 2048;
  std::vector<T> entries;
  T inverse_spacing;

  explicit ErfcTable(double x_max) : entries(2 * kPoints) {
    const double spacing = x_max / double(kPoints - 2);
    inverse_spacing = T(1.0 / spacing);
    for (int64_t k = 0; k < kPoints; ++k) {
      const double x = k * spacing;
      entries[2 * k] = T(std::erfc(x));
      entries[2 * k + 1] = T(-kTwoOverSqrtPi * std::exp(-x * x) * spacing);
    }
  }

  // erfc(x) and d erfc / dx
  inline void operator()(T x, T& value, T& derivative) const {
    const T scaled = x * inverse_spacing;
    const int64_t k = std::min(int64_t(scaled), kPoints - 2);
    const T u = scaled - T(k);
    const T* e = entries.data() + 2 * k;
    const T f0 = e[0], d0 = e[1], f1 = e[2], d1 = e[3];
    const T v = T(1) - u;
    value = v * v * (T(1) + T(2) * u) * f0 + u * v * v * d0 + u * u * (T(3) - T(2) * u) * f1 - u * u * v * d1;
    derivative = (T(6) * u * v * (f1 - f0) + v * (T(1) - T(3) * u) * d0 + u * (T(3) * u - T(2)) * d1) *
                 inverse_spacing;
  }
};

// gradient of a pair term with f = -(dE/dr)/r and d = x_j - x_i: += f d on the first atom (accumulated in
// first_sum), -= f d on atom j
template <typename T>
inline void add_pair_gradient(T* first_sum, T* gradient_j, T dx, T dy, T dz, T f) {
  const T fx = dx * f, fy = dy * f, fz = dz * f;
  first_sum[0] += fx;
  first_sum[1] += fy;
  first_sum[2] += fz;
  gradient_j[0] -= fx;
  gradient_j[1] -= fy;
  gradient_j[2] -= fz;
}

// The erfc table of a real-space Ewald sum with alpha * cutoff = x_max, built once per value and type.
template <typename T>
const ErfcTable<T>& erfc_table(double x_max) {
  static std::mutex mutex;
  static std::map<double, std::unique_ptr<ErfcTable<T>>> tables;
  std::lock_guard<std::mutex> lock(mutex);
  auto& table = tables[x_max];
  if (!table) table = std::make_unique<ErfcTable<T>>(x_max);
  return *table;
}

// Pairs [begin, end) of a pair list: energies[0] += E_LJ, energies[1] += E_Coulomb, and per atom
// gradients[6 atom + 0..2] += dE_LJ/dx, gradients[6 atom + 3..5] += dE_Coulomb/dx.
template <typename T>
void pair_range(const T* positions, const int64_t* first, const int64_t* second, const T* shifts,
                const T* charge_products, const T* sigma_squared, const T* epsilon4, int64_t n_pairs,
                int64_t n_lj, const PairOptions& options, const ErfcTable<T>* table, int64_t begin,
                int64_t end, double* energies, T* gradients) {
  const bool has_cutoff = options.cutoff > 0;
  const T cutoff2 = T(options.cutoff * options.cutoff);
  const bool switching = options.switch_distance >= 0;
  const T switch_distance = T(options.switch_distance);
  const T width = T(options.cutoff - options.switch_distance);
  const T alpha = T(options.alpha), krf = T(options.krf), crf = T(options.crf);
  const T gaussian_prefactor = T(options.alpha * kTwoOverSqrtPi);
  T* gradient_lj = gradients;
  T* gradient_coulomb = gradients + 3;
  double energy_lj = 0.0, energy_coulomb = 0.0;
  // pairs come sorted by first atom: its gradient is accumulated here and stored once
  int64_t current = -1;
  T first_lj[3] = {0, 0, 0}, first_coulomb[3] = {0, 0, 0};
  auto store_first = [&]() {
    if (current < 0) return;
    for (int d = 0; d < 3; ++d) {
      gradient_lj[6 * current + d] += first_lj[d];
      gradient_coulomb[6 * current + d] += first_coulomb[d];
      first_lj[d] = first_coulomb[d] = T(0);
    }
  };
  for (int64_t p = begin; p < end; ++p) {
    const int64_t i = first[p], j = second[p];
    if (i != current) {
      store_first();
      current = i;
    }
    T dx = positions[3 * j] - positions[3 * i];
    T dy = positions[3 * j + 1] - positions[3 * i + 1];
    T dz = positions[3 * j + 2] - positions[3 * i + 2];
    if (shifts != nullptr) {
      dx += shifts[p];
      dy += shifts[n_pairs + p];
      dz += shifts[2 * n_pairs + p];
    }
    const T r2 = dx * dx + dy * dy + dz * dz;
    if (has_cutoff && !(r2 < cutoff2)) continue;
    const T inverse_r = T(1) / std::sqrt(r2);
    const T inverse_r2 = inverse_r * inverse_r;
    const T qq = charge_products[p];
    T e_coulomb, f_coulomb;  // f = -(dE/dr) / r
    if (options.kind == kPlain) {
      e_coulomb = qq * inverse_r;
      f_coulomb = e_coulomb * inverse_r2;
    } else if (options.kind == kReactionField) {
      e_coulomb = qq * (inverse_r + krf * r2 - crf);
      f_coulomb = qq * (inverse_r * inverse_r2 - T(2) * krf);
    } else if (table != nullptr) {
      T erfc_value, erfc_derivative;
      (*table)(alpha * r2 * inverse_r, erfc_value, erfc_derivative);
      e_coulomb = qq * erfc_value * inverse_r;
      f_coulomb = (e_coulomb - qq * alpha * erfc_derivative) * inverse_r2;
    } else {
      const T alpha_r = alpha * r2 * inverse_r;
      e_coulomb = options.kind == kEwald ? qq * std::erfc(alpha_r) * inverse_r
                                         : -qq * std::erf(alpha_r) * inverse_r;
      f_coulomb = (e_coulomb + qq * gaussian_prefactor * std::exp(-alpha_r * alpha_r)) * inverse_r2;
    }
    energy_coulomb += e_coulomb;
    add_pair_gradient(first_coulomb, gradient_coulomb + 6 * j, dx, dy, dz, f_coulomb);
    if (p < n_lj) {
      const T s2 = sigma_squared[p] * inverse_r2;
      const T s6 = s2 * s2 * s2;
      T e_lj = epsilon4[p] * (s6 * s6 - s6);
      T f_lj = epsilon4[p] * (T(12) * s6 * s6 - T(6) * s6) * inverse_r2;
      if (switching) {
        const T r = r2 * inverse_r;
        const T x = std::min(std::max((r - switch_distance) / width, T(0)), T(1));
        const T switch_value = T(1) + x * x * x * (T(-10) + x * (T(15) - T(6) * x));
        const T switch_derivative = x * x * (T(-30) + x * (T(60) - T(30) * x)) / width;
        f_lj = f_lj * switch_value - e_lj * switch_derivative * inverse_r;
        e_lj *= switch_value;
      }
      energy_lj += e_lj;
      add_pair_gradient(first_lj, gradient_lj + 6 * j, dx, dy, dz, f_lj);
    }
  }
  store_first();
  energies[0] += energy_lj;
  energies[1] += energy_coulomb;
}

// Chunks of pairs: as many as the pair count asks for (never the thread count), so that the sums are the
// same whatever the number of threads (a run that changes its thread count, or continues on a machine with
// another, stays bit for bit the same).
constexpr int64_t kPairsPerChunk = 4096, kMaxPairChunks = 16;

int64_t pair_chunks(int64_t n_pairs) {
  return std::min(kMaxPairChunks, std::max<int64_t>(1, (n_pairs + kPairsPerChunk - 1) / kPairsPerChunk));
}

// energies (2,) and gradients (N, 2, 3) of every pair, summed over the chunks in chunk order
template <typename T>
void pair_forces_impl(const T* positions, const int64_t* first, const int64_t* second, const T* shifts,
                      const T* charge_products, const T* sigma_squared, const T* epsilon4, int64_t n_pairs,
                      int64_t n_lj, int64_t n_atoms, PairOptions options, double* energies, T* gradients) {
  // real-space Ewald with a cutoff: tabulated erfc (as OpenMM's CPU platform); otherwise libm
  const bool tabulated = options.kind == kEwald && options.cutoff > 0;
  const ErfcTable<T>* table = tabulated ? &erfc_table<T>(options.alpha * options.cutoff) : nullptr;
  const int64_t n_chunks = pair_chunks(n_pairs), stride = 6 * n_atoms;
  const int64_t per_chunk = (n_pairs + n_chunks - 1) / n_chunks;
  if (n_chunks == 1) {
    pair_range(positions, first, second, shifts, charge_products, sigma_squared, epsilon4, n_pairs, n_lj,
               options, table, 0, n_pairs, energies, gradients);
    return;
  }
  std::vector<T> buffers(size_t(n_chunks - 1) * stride, T(0));
  std::vector<double> chunk_energies(2 * n_chunks, 0.0);
  at::parallel_for(0, n_chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t chunk = begin; chunk < end; ++chunk) {
      T* gradient = chunk == 0 ? gradients : buffers.data() + (chunk - 1) * stride;
      pair_range(positions, first, second, shifts, charge_products, sigma_squared, epsilon4, n_pairs, n_lj,
                 options, table, chunk * per_chunk, std::min(n_pairs, (chunk + 1) * per_chunk),
                 chunk_energies.data() + 2 * chunk, gradient);
    }
  });
  for (int64_t chunk = 1; chunk < n_chunks; ++chunk) {
    const T* gradient = buffers.data() + (chunk - 1) * stride;
    for (int64_t k = 0; k < stride; ++k) gradients[k] += gradient[k];
  }
  for (int64_t chunk = 0; chunk < n_chunks; ++chunk) {
    energies[0] += chunk_energies[2 * chunk];
    energies[1] += chunk_energies[2 * chunk + 1];
  }
}

}  // namespace

namespace mindsponge_kernels {

// (energies (2,) float64: LJ, Coulomb; gradients (2, N, 3): dE_LJ/dx, dE_Coulomb/dx)
std::vector<at::Tensor> pair_forces(at::Tensor positions, at::Tensor first, at::Tensor second,
                                    at::Tensor shifts, at::Tensor charge_products, at::Tensor sigma_squared,
                                    at::Tensor epsilon4, double cutoff, double switch_distance, int64_t kind,
                                    double alpha, double krf, double crf) {
  positions = positions.contiguous();
  const int64_t n_atoms = positions.size(0), n_pairs = first.size(0), n_lj = epsilon4.size(0);
  auto energies = at::zeros({2}, positions.options().dtype(at::kDouble));
  auto gradients = at::zeros({n_atoms, 2, 3}, positions.options());
  const bool has_shifts = shifts.numel() > 0;
  if (has_shifts) shifts = shifts.contiguous();
  first = first.contiguous();
  second = second.contiguous();
  AT_DISPATCH_FLOATING_TYPES(positions.scalar_type(), "pair_forces", [&] {
    auto charges_t = charge_products.contiguous(), sigma_t = sigma_squared.contiguous();
    auto epsilon_t = epsilon4.contiguous();
    pair_forces_impl<scalar_t>(
        positions.data_ptr<scalar_t>(), first.data_ptr<int64_t>(), second.data_ptr<int64_t>(),
        has_shifts ? shifts.data_ptr<scalar_t>() : nullptr, charges_t.data_ptr<scalar_t>(),
        sigma_t.data_ptr<scalar_t>(), epsilon_t.data_ptr<scalar_t>(), n_pairs, n_lj, n_atoms,
        PairOptions{cutoff, switch_distance, kind, alpha, krf, crf}, energies.data_ptr<double>(),
        gradients.data_ptr<scalar_t>());
  });
  return {energies, gradients.permute({1, 0, 2})};
}

PairTerm::PairTerm(at::Tensor first, at::Tensor second, at::Tensor charge_products, at::Tensor sigma_squared,
                   at::Tensor epsilon4, double cutoff, double switch_distance, int64_t kind, double alpha,
                   double krf, double crf, bool periodic)
    : first_(first.to(at::kLong).contiguous()),
      second_(second.to(at::kLong).contiguous()),
      charge_products_(charge_products.contiguous()),
      sigma_squared_(sigma_squared.contiguous()),
      epsilon4_(epsilon4.contiguous()),
      options_{cutoff, switch_distance, kind, alpha, krf, crf},
      periodic_(periodic) {}

double PairTerm::add_forces(const at::Tensor& positions, const at::Tensor& box, at::Tensor& forces) {
  const int64_t n_atoms = positions.size(0), n_pairs = first_.size(0), n_lj = epsilon4_.size(0);
  if (n_pairs == 0) return 0.0;
  if (gradients_.numel() != n_atoms * 6 || gradients_.scalar_type() != positions.scalar_type()) {
    gradients_ = at::empty({n_atoms, 6}, positions.options());
    charge_products_ = charge_products_.to(positions.scalar_type());
    sigma_squared_ = sigma_squared_.to(positions.scalar_type());
    epsilon4_ = epsilon4_.to(positions.scalar_type());
  }
  gradients_.zero_();
  double energies[2] = {0.0, 0.0};
  AT_DISPATCH_FLOATING_TYPES(positions.scalar_type(), "pair_term", [&] {
    const scalar_t* x = positions.data_ptr<scalar_t>();
    const int64_t* first = first_.data_ptr<int64_t>();
    const int64_t* second = second_.data_ptr<int64_t>();
    std::vector<scalar_t> shifts;
    if (periodic_ && box.defined()) {  // minimum-image lattice shifts (mindsponge.space.minimum_image), (3, P)
      const scalar_t* b = box.data_ptr<scalar_t>();
      shifts.resize(3 * n_pairs);
      for (int64_t p = 0; p < n_pairs; ++p) {
        scalar_t direct[3], d[3];
        for (int a = 0; a < 3; ++a) direct[a] = d[a] = x[3 * second[p] + a] - x[3 * first[p] + a];
        for (int axis = 2; axis >= 0; --axis) {
          const scalar_t image = std::nearbyint(d[axis] / b[4 * axis]);
          for (int a = 0; a < 3; ++a) d[a] -= image * b[3 * axis + a];
        }
        for (int a = 0; a < 3; ++a) shifts[a * n_pairs + p] = d[a] - direct[a];
      }
    }
    pair_forces_impl<scalar_t>(x, first, second, shifts.empty() ? nullptr : shifts.data(),
                               charge_products_.data_ptr<scalar_t>(), sigma_squared_.data_ptr<scalar_t>(),
                               epsilon4_.data_ptr<scalar_t>(), n_pairs, n_lj, n_atoms, options_, energies,
                               gradients_.data_ptr<scalar_t>());
    const scalar_t* gradient = gradients_.data_ptr<scalar_t>();
    scalar_t* f = forces.data_ptr<scalar_t>();
    for (int64_t atom = 0; atom < n_atoms; ++atom)
      for (int d = 0; d < 3; ++d) f[3 * atom + d] -= gradient[6 * atom + d] + gradient[6 * atom + 3 + d];
  });
  return energies[0] + energies[1];
}

}  // namespace mindsponge_kernels
