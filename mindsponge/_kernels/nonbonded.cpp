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
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "pair_terms.h"

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

template <typename T>
void pair_forces_impl(const T* positions, const int64_t* first, const int64_t* second, const T* shifts,
                      const T* charge_products, const T* sigma_squared, const T* epsilon4, int64_t n_pairs,
                      int64_t n_lj, int64_t n_atoms, PairOptions options, double* energies, T* gradients) {
  const bool has_cutoff = options.cutoff > 0;
  const T cutoff2 = T(options.cutoff * options.cutoff);
  const bool switching = options.switch_distance >= 0;
  const T switch_distance = T(options.switch_distance);
  const T width = T(options.cutoff - options.switch_distance);
  const T alpha = T(options.alpha), krf = T(options.krf), crf = T(options.crf);
  const T gaussian_prefactor = T(options.alpha * kTwoOverSqrtPi);
  // real-space Ewald with a cutoff: tabulated erfc (as OpenMM's CPU platform); otherwise libm
  const bool tabulated = options.kind == kEwald && has_cutoff;
  const ErfcTable<T> table(tabulated ? options.alpha * options.cutoff : 1.0);
  const int64_t stride = 2 * 3 * n_atoms;
  at::parallel_for(0, n_pairs, 4096, [&](int64_t begin, int64_t end) {
    const int thread = at::get_thread_num();
    // per atom: dE_LJ/dx (3 values) then dE_Coulomb/dx (3 values), one cache line for both
    T* gradient_lj = gradients + thread * stride;
    T* gradient_coulomb = gradient_lj + 3;
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
      } else if (tabulated) {
        T erfc_value, erfc_derivative;
        table(alpha * r2 * inverse_r, erfc_value, erfc_derivative);
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
    energies[2 * thread] += energy_lj;
    energies[2 * thread + 1] += energy_coulomb;
  });
}

// (energies (2,) float64: LJ, Coulomb; gradients (2, N, 3): dE_LJ/dx, dE_Coulomb/dx)
std::vector<torch::Tensor> pair_forces(torch::Tensor positions, torch::Tensor first, torch::Tensor second,
                                       torch::Tensor shifts, torch::Tensor charge_products,
                                       torch::Tensor sigma_squared, torch::Tensor epsilon4, double cutoff,
                                       double switch_distance, int64_t kind, double alpha, double krf,
                                       double crf) {
  positions = positions.contiguous();
  const int64_t n_atoms = positions.size(0), n_pairs = first.size(0), n_lj = epsilon4.size(0);
  const int threads = at::get_num_threads();
  auto energies = torch::zeros({threads, 2}, positions.options().dtype(torch::kFloat64));
  auto gradients = torch::zeros({threads, n_atoms, 2, 3}, positions.options());
  const bool has_shifts = shifts.numel() > 0;
  if (has_shifts) shifts = shifts.contiguous();
  AT_DISPATCH_FLOATING_TYPES(positions.scalar_type(), "pair_forces", [&] {
    pair_forces_impl<scalar_t>(
        positions.data_ptr<scalar_t>(), first.contiguous().data_ptr<int64_t>(),
        second.contiguous().data_ptr<int64_t>(), has_shifts ? shifts.data_ptr<scalar_t>() : nullptr,
        charge_products.contiguous().data_ptr<scalar_t>(), sigma_squared.contiguous().data_ptr<scalar_t>(),
        epsilon4.contiguous().data_ptr<scalar_t>(), n_pairs, n_lj, n_atoms,
        PairOptions{cutoff, switch_distance, kind, alpha, krf, crf}, energies.data_ptr<double>(),
        gradients.data_ptr<scalar_t>());
  });
  return {energies.sum(0), gradients.sum(0).permute({1, 0, 2})};
}

}  // namespace

// defined in cell_search.cpp, cluster_search.cpp, cluster_forces.cpp and pme.cpp (one module, five translation units)
namespace mindsponge_kernels {
std::vector<torch::Tensor> cell_neighbors(torch::Tensor wrapped, torch::Tensor box, torch::Tensor cell_xyz,
                                          std::vector<int64_t> n_cells, std::vector<int64_t> reach,
                                          double list_cutoff, torch::Tensor exclusion_starts,
                                          torch::Tensor exclusion_partners, bool deduplicate);
torch::Tensor rows_to_pairs(torch::Tensor starts, torch::Tensor partners);
std::vector<torch::Tensor> cluster_forces(torch::Tensor positions, torch::Tensor box, torch::Tensor reference,
                                          torch::Tensor slot_atoms, torch::Tensor slot_shifts,
                                          torch::Tensor pair_starts, torch::Tensor pair_clusters,
                                          torch::Tensor pair_shifts, torch::Tensor pair_masks,
                                          torch::Tensor scaled_charges, torch::Tensor half_sigma,
                                          torch::Tensor epsilon_root2, double cutoff, double switch_distance,
                                          int64_t kind, double alpha, double krf, double crf, bool combined);
std::vector<torch::Tensor> cluster_pairs(torch::Tensor positions, torch::Tensor box, double list_cutoff,
                                         torch::Tensor exclusion_starts, torch::Tensor exclusion_partners);
std::vector<torch::Tensor> prepare_pairs(torch::Tensor pairs, torch::Tensor reference, torch::Tensor box,
                                         torch::Tensor charges, torch::Tensor sigma, torch::Tensor epsilon,
                                         double coulomb_constant);
torch::Tensor pme_spread(torch::Tensor scaled, torch::Tensor charges, std::vector<int64_t> sizes, int64_t order);
torch::Tensor pme_gather(torch::Tensor potential, torch::Tensor scaled, torch::Tensor charges,
                         std::vector<int64_t> sizes, int64_t order);
}  // namespace mindsponge_kernels


PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("pair_forces", &pair_forces, "LJ + Coulomb energies and gradients of a pair list");
  module.def("cell_neighbors", &mindsponge_kernels::cell_neighbors, "cell-list search as compressed rows of neighbours");
  module.def("cluster_pairs", &mindsponge_kernels::cluster_pairs, "clusters of 8 atoms and their cluster-pair list");
  module.def("cluster_forces", &mindsponge_kernels::cluster_forces, "LJ + Coulomb energies and gradients over a cluster-pair list");
  module.def("rows_to_pairs", &mindsponge_kernels::rows_to_pairs, "compressed rows as (P, 2) pairs i < j sorted by i");
  module.def("prepare_pairs", &mindsponge_kernels::prepare_pairs, "pair parameters and shifts, LJ pairs first, by first atom");
  module.def("pme_spread", &mindsponge_kernels::pme_spread, "B-spline charge spreading onto the PME grid");
  module.def("pme_gather", &mindsponge_kernels::pme_gather, "PME energy gradient wrt the scaled coordinates");
}
