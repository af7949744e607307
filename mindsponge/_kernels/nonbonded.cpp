// Compiled CPU kernels of mindsponge's non-bonded forces (see mindsponge/_kernels/__init__.py): this file
// holds the pair kernels and the module's bindings; cell_search.cpp the cell search and the pair set, pme.cpp PME.
//
// pair_forces : Lennard-Jones + Coulomb energies of a pair list and their position gradients in one pass
// cluster_forces: the same over a cluster-pair list with per-atom parameters (SIMD over clusters of 8 atoms)
// cluster_pairs: the clusters of 8 atoms and their cluster-pair list (cluster_search.cpp)
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

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace {

constexpr int64_t kClusterSize = 8;  // atoms per cluster, as in cluster_search.cpp
constexpr double kFarAway = 1.0e4;   // where the empty slots of a cluster sit, nm (their pairs are masked out)
constexpr int64_t kPlain = 0, kReactionField = 1, kEwald = 2, kErf = 3;
constexpr double kTwoOverSqrtPi = 1.1283791670955126;

struct PairOptions {
  double cutoff;           // <= 0: no cutoff
  double switch_distance;  // < 0: no switching
  int64_t kind;
  double alpha, krf, crf;
};

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

// x rounded to the nearest integer (ties to even) for |x| < 2^22, in plain arithmetic that vectorises
template <typename T>
inline T round_to_integer(T x) {
  const T magic = T(1.5) * T(int64_t(1) << (std::numeric_limits<T>::digits - 1));
  return (x + magic) - magic;
}


// calls run(periodic, kind, switching, combined) with each flag as a compile-time constant (std::bool_constant
// or std::integral_constant), for the kernels templated on them
template <typename Run>
void dispatch_pair_kernel(bool periodic, int64_t kind, bool switching, bool combined, Run run) {
  auto with_combined = [&](auto periodic_tag, auto kind_tag, auto switching_tag) {
    if (combined)
      run(periodic_tag, kind_tag, switching_tag, std::true_type{});
    else
      run(periodic_tag, kind_tag, switching_tag, std::false_type{});
  };
  auto with_switching = [&](auto periodic_tag, auto kind_tag) {
    if (switching)
      with_combined(periodic_tag, kind_tag, std::true_type{});
    else
      with_combined(periodic_tag, kind_tag, std::false_type{});
  };
  auto with_kind = [&](auto periodic_tag) {
    if (kind == kEwald)
      with_switching(periodic_tag, std::integral_constant<int64_t, kEwald>{});
    else if (kind == kReactionField)
      with_switching(periodic_tag, std::integral_constant<int64_t, kReactionField>{});
    else
      with_switching(periodic_tag, std::integral_constant<int64_t, kPlain>{});
  };
  if (periodic)
    with_kind(std::true_type{});
  else
    with_kind(std::false_type{});
}

// N lanes of T in one value of GCC's and Clang's vector extensions: SIMD registers wherever the machine has
// them (16 floats: one AVX-512 or two AVX registers), plain scalar code where it has none
template <typename T, int N>
struct VectorOf {
  typedef T type __attribute__((vector_size(N * sizeof(T))));
};
template <typename T, int N = 16>
using Lanes = typename VectorOf<T, N>::type;
template <typename V>
using LaneMask = decltype(V{} < V{});

template <typename T, int N>
inline Lanes<T, N> load_lanes(const T* values) {
  Lanes<T, N> lanes;
  std::memcpy(&lanes, values, sizeof lanes);
  return lanes;
}
template <typename T, int N>
inline void add_to_memory(T* values, Lanes<T, N> lanes) {
  lanes += load_lanes<T, N>(values);
  std::memcpy(values, &lanes, sizeof lanes);
}
template <typename T, int N>
inline T sum_lanes(Lanes<T, N> lanes) {
  T sum = 0;
  for (int lane = 0; lane < N; ++lane) sum += lanes[lane];
  return sum;
}
// 1 / sqrt(x) and 1 / x in each lane. 16 floats with AVX-512: the hardware's 14-bit estimates refined by one
// Newton step (relative error about 1e-7, float round-off; the divisions and square roots they replace held
// the cluster kernel up); otherwise divisions and square roots
template <typename V>
inline V inverse_square_root(V x) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<V, Lanes<float, 16>>) {
    const V estimate = V(_mm512_rsqrt14_ps(__m512(x)));
    return estimate * (1.5f - 0.5f * x * estimate * estimate);
  }
#endif
  V root;
  for (int lane = 0; lane < int(sizeof(V) / sizeof(x[0])); ++lane) root[lane] = std::sqrt(x[lane]);
  return 1 / root;
}
template <typename V>
inline V reciprocal(V x) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<V, Lanes<float, 16>>) {
    const V estimate = V(_mm512_rcp14_ps(__m512(x)));
    return estimate * (2.0f - x * estimate);
  }
#endif
  return 1 / x;
}

// exp(x) in float lanes for x <= 88, branch-free (Cephes expf: x = n ln 2 + r with |r| <= ln 2 / 2 and a degree-6
// polynomial, relative error ~1e-7; results below ~1e-38 flush to 0)
template <typename V>
inline V exp_lanes(V x) {
  x = x > -87.0f ? x : V{} - 87.0f;
  const float magic = 12582912.0f;  // 1.5 2^23: adding and subtracting it rounds to an integer
  const V n = (x * 1.44269504088896341f + magic) - magic;
  const V r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  V p = V{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  using Bits = LaneMask<V>;
  return (V)((Bits)p + (__builtin_convertvector(n, Bits) << 23));
}
// erfc(x) and exp(-x^2) in each lane, x >= 0. float: the Chebyshev fit of Numerical Recipes' erfcc (relative
// error below 1.2e-7 everywhere, float round-off) with exp_lanes, all in SIMD; double: libm, in the lanes
// `wanted` only (the others are left 0)
template <typename V>
inline void erfc_and_gaussian_lanes(V x, LaneMask<V> wanted, V& value, V& gaussian) {
  if constexpr (std::is_same_v<std::remove_cvref_t<decltype(x[0])>, float>) {
    const V t = reciprocal(1.0f + 0.5f * x);
    const V poly =
        -1.26551223f +
        t * (1.00002368f +
             t * (0.37409196f +
                  t * (0.09678418f +
                       t * (-0.18628806f +
                            t * (0.27886807f +
                                 t * (-1.13520398f + t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
    gaussian = exp_lanes(-x * x);
    value = t * exp_lanes(poly - x * x);
  } else {
    value = gaussian = V{};
    for (int lane = 0; lane < int(sizeof(V) / sizeof(x[0])); ++lane)
      if (wanted[lane]) {
        value[lane] = std::erfc(x[lane]);
        gaussian[lane] = std::exp(-x[lane] * x[lane]);
      }
  }
}

// Direct-space LJ + Coulomb over the cluster-pair list of cluster_search.cpp (the scheme of GROMACS and of
// OpenMM's CPU platform). The atoms' data are laid out by cluster (positions and per-atom parameters:
// sigma_ij = h_i + h_j, 4 eps_ij = e_i e_j, f q_i q_j = c_i c_j), so the kernel loads and accumulates whole
// vectors: no gathering of partners and no scattering of forces pair by pair. For each listed pair of
// clusters, the rows of the mask with a pair to compute are taken two at a time: two atoms of the cluster
// against the partner's 8 atoms fill 16 SIMD lanes. A pair computes when its mask bit is set and it is within
// the cutoff. Positions are taken to the images of the list's build: plus the lattice vector that wrapped each
// atom into the box then (slot_shifts), less any lattice vector the atom was moved by since (positions -
// reference, rounded to the lattice), so the list's cluster shifts stay valid.
template <typename T, bool periodic, int64_t kind, bool switching, bool combined>
void cluster_forces_impl(const T* positions, const T* box, const T* reference, const int32_t* slot_atoms,
                         const T* slot_shifts, const int64_t* pair_starts, const int32_t* pair_clusters,
                         const T* pair_shifts, const int64_t* pair_masks, const T* scaled_charges,
                         const T* half_sigma, const T* epsilon_root2, int64_t n_clusters, int64_t n_atoms,
                         PairOptions options, double* energies, T* gradients) {
  constexpr int64_t C = kClusterSize, kGradients = combined ? 3 : 6;
  static_assert(C == 8, "the cluster kernel holds a partner cluster in eight lanes");
  using V = Lanes<T, 2 * C>;  // two atoms of a cluster against the 8 of the partner
  using Half = Lanes<T, C>;
  using Mask = LaneMask<V>;
  const int64_t n_slots = C * n_clusters;
  // per cluster: x[8], y[8], z[8], f^1/2 q[8], sigma / 2 [8], 2 eps^1/2 [8]
  std::vector<T> blocks(6 * n_slots);
  const T ax = periodic ? box[0] : T(0), bx = periodic ? box[3] : T(0), by = periodic ? box[4] : T(0);
  const T cx = periodic ? box[6] : T(0), cy = periodic ? box[7] : T(0), cz = periodic ? box[8] : T(0);
  at::parallel_for(0, n_clusters, 256, [&](int64_t begin, int64_t end) {
    for (int64_t cluster = begin; cluster < end; ++cluster)
      for (int64_t s = 0; s < C; ++s) {
        const int64_t slot = C * cluster + s, atom = slot_atoms[slot];
        T* block = blocks.data() + 6 * C * cluster + s;
        T x = T(kFarAway), y = T(kFarAway), z = T(kFarAway);
        T charge = 0, sigma = 0, epsilon = 0;
        if (atom >= 0) {
          x = positions[3 * atom] + slot_shifts[3 * slot];
          y = positions[3 * atom + 1] + slot_shifts[3 * slot + 1];
          z = positions[3 * atom + 2] + slot_shifts[3 * slot + 2];
          if constexpr (periodic) {  // moved back by the lattice vector the atom was wrapped by since the build
            const T dx = positions[3 * atom] - reference[3 * atom];
            const T dy = positions[3 * atom + 1] - reference[3 * atom + 1];
            const T dz = positions[3 * atom + 2] - reference[3 * atom + 2];
            const T image_z = round_to_integer(dz / cz);
            const T image_y = round_to_integer((dy - image_z * cy) / by);
            const T image_x = round_to_integer((dx - image_z * cx - image_y * bx) / ax);
            x -= image_x * ax + image_y * bx + image_z * cx;
            y -= image_y * by + image_z * cy;
            z -= image_z * cz;
          }
          charge = scaled_charges[atom];
          sigma = half_sigma[atom];
          epsilon = epsilon_root2[atom];
        }
        block[0] = x;
        block[C] = y;
        block[2 * C] = z;
        block[3 * C] = charge;
        block[4 * C] = sigma;
        block[5 * C] = epsilon;
      }
  });
  const bool has_cutoff = options.cutoff > 0;
  const T cutoff2 = has_cutoff ? T(options.cutoff * options.cutoff) : std::numeric_limits<T>::infinity();
  const T switch_distance = T(options.switch_distance), width = T(options.cutoff - options.switch_distance);
  const T alpha = T(options.alpha), krf = T(options.krf), crf = T(options.crf);
  const T gaussian_prefactor = T(options.alpha * kTwoOverSqrtPi);
  const Mask lane_bit = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
  const Mask upper = {0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1, -1, -1, -1, -1};  // the second row's lanes
  const T inverse_width = T(1) / width;
  const V zero = {};
  const int64_t n_pairs = pair_starts[n_clusters];
  const int threads = at::get_num_threads();
  const int64_t n_chunks = std::max<int64_t>(1, std::min<int64_t>(n_clusters, 8 * threads));
  std::vector<int64_t> cluster_bounds(n_chunks + 1, n_clusters);
  cluster_bounds[0] = 0;
  for (int64_t c = 1; c < n_chunks; ++c)
    cluster_bounds[c] =
        std::lower_bound(pair_starts, pair_starts + n_clusters, (n_pairs * c) / n_chunks) - pair_starts;
  // per thread, in cluster order: [cluster][component][slot], components x, y, z (or LJ x, y, z, Coulomb x, y, z)
  std::vector<T> slot_gradients(size_t(threads) * kGradients * n_slots, T(0));
  at::parallel_for(0, n_chunks, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
    const int thread = at::get_thread_num();
    T* gradient = slot_gradients.data() + size_t(thread) * kGradients * n_slots;
    double energy_lj = 0.0, energy_coulomb = 0.0;
    for (int64_t cluster = cluster_bounds[chunk_begin]; cluster < cluster_bounds[chunk_end]; ++cluster) {
      const T* block_i = blocks.data() + 6 * C * cluster;
      Half force_i[kGradients][C];  // per atom of the cluster, lanes summed at the end
      for (auto& component : force_i)
        for (Half& lanes : component) lanes = Half{};
      V cluster_lj = zero, cluster_coulomb = zero;
      for (int64_t p = pair_starts[cluster]; p < pair_starts[cluster + 1]; ++p) {
        const T* block_j = blocks.data() + 6 * C * int64_t(pair_clusters[p]);
        const uint64_t mask = uint64_t(pair_masks[p]);
        // the partner's 8 atoms twice: two atoms of this cluster (two rows of the mask) per 16 lanes
        auto twice = [&](int64_t offset, T shift) {
          const Half half = load_lanes<T, C>(block_j + offset) + shift;
          return V(__builtin_shufflevector(half, half, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7));
        };
        const V xj = twice(0, pair_shifts[3 * p]), yj = twice(C, pair_shifts[3 * p + 1]);
        const V zj = twice(2 * C, pair_shifts[3 * p + 2]);
        const V charge_j = twice(3 * C, T(0)), sigma_j = twice(4 * C, T(0)), epsilon_j = twice(5 * C, T(0));
        V force_j[kGradients];
        for (V& lanes : force_j) lanes = zero;
        // the rows with a pair to compute, two at a time (an odd last one with an empty row)
        int64_t rows[C + 1], n_rows = 0;
        for (int64_t a = 0; a < C; ++a)
          if ((mask >> (C * a)) & 0xFFu) rows[n_rows++] = a;
        for (int64_t k = 0; k < n_rows; k += 2) {
          const int64_t a0 = rows[k], a1 = k + 1 < n_rows ? rows[k + 1] : a0;
          const uint32_t bits = uint32_t((mask >> (C * a0)) & 0xFFu) |
                                (k + 1 < n_rows ? uint32_t((mask >> (C * a1)) & 0xFFu) << C : 0u);
          auto rows_of = [&](int64_t offset) {  // row a0's value in the first 8 lanes, a1's in the others
            return upper ? zero + block_i[offset + a1] : zero + block_i[offset + a0];
          };
          const V dx = xj - rows_of(0), dy = yj - rows_of(C), dz = zj - rows_of(2 * C);
          const V r2 = dx * dx + dy * dy + dz * dz;
          const Mask keep = (((Mask{} + bits) & lane_bit) != 0) & (r2 < cutoff2);
          const V inverse_r = keep ? inverse_square_root(r2) : zero;
          const V inverse_r2 = inverse_r * inverse_r;
          const V sigma_ij = sigma_j + rows_of(4 * C);
          const V s2 = sigma_ij * sigma_ij * inverse_r2;
          const V s6 = s2 * s2 * s2;
          const V epsilon4 = epsilon_j * rows_of(5 * C);
          V e_lj = epsilon4 * (s6 * s6 - s6);
          V f_lj = epsilon4 * (T(12) * s6 * s6 - T(6) * s6) * inverse_r2;
          if constexpr (switching) {
            const V scaled = (r2 * inverse_r - switch_distance) * inverse_width;
            const V u = scaled < T(0) ? zero : (scaled > T(1) ? zero + T(1) : scaled);
            const V switch_value = T(1) + u * u * u * (T(-10) + u * (T(15) - T(6) * u));
            const V switch_derivative = u * u * (T(-30) + u * (T(60) - T(30) * u)) * inverse_width;
            f_lj = f_lj * switch_value - e_lj * switch_derivative * inverse_r;
            e_lj *= switch_value;
          }
          const V qq = keep ? charge_j * rows_of(3 * C) : zero;
          V e_coulomb, f_coulomb;
          if constexpr (kind == kEwald) {
            V erfc_value, gaussian;
            erfc_and_gaussian_lanes(alpha * r2 * inverse_r, keep, erfc_value, gaussian);
            e_coulomb = qq * erfc_value * inverse_r;
            f_coulomb = (e_coulomb + qq * gaussian_prefactor * gaussian) * inverse_r2;
          } else if constexpr (kind == kReactionField) {
            e_coulomb = qq * (inverse_r + krf * r2 - crf);
            f_coulomb = qq * (inverse_r * inverse_r2 - T(2) * krf);
          } else {
            e_coulomb = qq * inverse_r;
            f_coulomb = e_coulomb * inverse_r2;
          }
          cluster_lj += e_lj;
          cluster_coulomb += e_coulomb;
          const V f_first = combined ? f_lj + f_coulomb : f_lj;
          const V components[6] = {f_first * dx, f_first * dy, f_first * dz,
                                   f_coulomb * dx, f_coulomb * dy, f_coulomb * dz};
          for (int64_t g = 0; g < kGradients; ++g) {
            force_j[g] -= components[g];
            const Half low = __builtin_shufflevector(components[g], components[g], 0, 1, 2, 3, 4, 5, 6, 7);
            const Half high = __builtin_shufflevector(components[g], components[g], 8, 9, 10, 11, 12, 13, 14, 15);
            force_i[g][a0] += low;
            force_i[g][a1] += high;  // zero in an empty row
          }
        }
        T* gradient_j = gradient + kGradients * C * int64_t(pair_clusters[p]);
        for (int64_t g = 0; g < kGradients; ++g) {
          const Half low = __builtin_shufflevector(force_j[g], force_j[g], 0, 1, 2, 3, 4, 5, 6, 7);
          const Half high = __builtin_shufflevector(force_j[g], force_j[g], 8, 9, 10, 11, 12, 13, 14, 15);
          add_to_memory<T, C>(gradient_j + C * g, low + high);
        }
      }
      T* gradient_i = gradient + kGradients * C * cluster;
      for (int64_t g = 0; g < kGradients; ++g)
        for (int64_t a = 0; a < C; ++a) gradient_i[C * g + a] += sum_lanes<T, C>(force_i[g][a]);
      energy_lj += double(sum_lanes<T, 2 * C>(cluster_lj));
      energy_coulomb += double(sum_lanes<T, 2 * C>(cluster_coulomb));
    }
    energies[2 * thread] += energy_lj;
    energies[2 * thread + 1] += energy_coulomb;
  });
  // the threads' sums, from cluster order to atom order
  at::parallel_for(0, n_clusters, 256, [&](int64_t begin, int64_t end) {
    for (int64_t cluster = begin; cluster < end; ++cluster)
      for (int64_t s = 0; s < C; ++s) {
        const int64_t atom = slot_atoms[C * cluster + s];
        if (atom < 0) continue;
        for (int64_t g = 0; g < kGradients; ++g) {
          T sum = 0;
          for (int t = 0; t < threads; ++t)
            sum += slot_gradients[(size_t(t) * n_clusters + cluster) * kGradients * C + C * g + s];
          gradients[kGradients * atom + g] = sum;
        }
      }
  });
}

// (energies (2,) float64: LJ, Coulomb; gradients (2, N, 3): dE_LJ/dx, dE_Coulomb/dx) as pair_forces, or with
// `combined` gradients (1, N, 3): d(E_LJ + E_Coulomb)/dx, over the cluster pairs of cluster_pairs
std::vector<torch::Tensor> cluster_forces(torch::Tensor positions, torch::Tensor box, torch::Tensor reference,
                                          torch::Tensor slot_atoms, torch::Tensor slot_shifts,
                                          torch::Tensor pair_starts, torch::Tensor pair_clusters,
                                          torch::Tensor pair_shifts, torch::Tensor pair_masks,
                                          torch::Tensor scaled_charges, torch::Tensor half_sigma,
                                          torch::Tensor epsilon_root2, double cutoff, double switch_distance,
                                          int64_t kind, double alpha, double krf, double crf, bool combined) {
  TORCH_CHECK(kind == kPlain || kind == kReactionField || kind == kEwald,
              "cluster_forces: kind must be plain, reaction field or Ewald");
  positions = positions.contiguous();
  const int64_t n_atoms = positions.size(0), n_clusters = slot_atoms.numel() / kClusterSize;
  TORCH_CHECK(pair_starts.numel() == n_clusters + 1, "cluster_forces: pair_starts must have C + 1 entries");
  const bool periodic = box.numel() > 0;
  if (periodic) box = box.to(positions.scalar_type()).contiguous();
  reference = reference.to(positions.scalar_type()).contiguous();
  slot_shifts = slot_shifts.to(positions.scalar_type()).contiguous();
  pair_shifts = pair_shifts.to(positions.scalar_type()).contiguous();
  const int threads = at::get_num_threads();
  auto energies = torch::zeros({threads, 2}, positions.options().dtype(torch::kFloat64));
  auto gradients = torch::zeros({n_atoms, combined ? 1 : 2, 3}, positions.options());
  const PairOptions options{cutoff, switch_distance, kind, alpha, krf, crf};
  AT_DISPATCH_FLOATING_TYPES(positions.scalar_type(), "cluster_forces", [&] {
    const scalar_t* charges_data = scaled_charges.contiguous().data_ptr<scalar_t>();
    const scalar_t* sigma_data = half_sigma.contiguous().data_ptr<scalar_t>();
    const scalar_t* epsilon_data = epsilon_root2.contiguous().data_ptr<scalar_t>();
    const int32_t* slot_atoms_data = slot_atoms.contiguous().data_ptr<int32_t>();
    const int64_t* starts_data = pair_starts.contiguous().data_ptr<int64_t>();
    const int32_t* clusters_data = pair_clusters.contiguous().data_ptr<int32_t>();
    const int64_t* masks_data = pair_masks.contiguous().data_ptr<int64_t>();
    dispatch_pair_kernel(periodic, kind, switch_distance >= 0, combined, [&](auto periodic_tag, auto kind_tag,
                                                                             auto switching_tag, auto combined_tag) {
      cluster_forces_impl<scalar_t, decltype(periodic_tag)::value, decltype(kind_tag)::value,
                          decltype(switching_tag)::value, decltype(combined_tag)::value>(
          positions.data_ptr<scalar_t>(), periodic ? box.data_ptr<scalar_t>() : nullptr,
          reference.data_ptr<scalar_t>(), slot_atoms_data, slot_shifts.data_ptr<scalar_t>(), starts_data,
          clusters_data, pair_shifts.data_ptr<scalar_t>(), masks_data, charges_data, sigma_data, epsilon_data,
          n_clusters, n_atoms, options, energies.data_ptr<double>(), gradients.data_ptr<scalar_t>());
    });
  });
  return {energies.sum(0), gradients.permute({1, 0, 2})};
}
}  // namespace

// defined in cell_search.cpp, cluster_search.cpp and pme.cpp (one module, four translation units)
namespace mindsponge_kernels {
std::vector<torch::Tensor> cell_neighbors(torch::Tensor wrapped, torch::Tensor box, torch::Tensor cell_xyz,
                                          std::vector<int64_t> n_cells, std::vector<int64_t> reach,
                                          double list_cutoff, torch::Tensor exclusion_starts,
                                          torch::Tensor exclusion_partners, bool deduplicate);
torch::Tensor rows_to_pairs(torch::Tensor starts, torch::Tensor partners);
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
  module.def("cluster_forces", &cluster_forces, "LJ + Coulomb energies and gradients over a cluster-pair list");
  module.def("rows_to_pairs", &mindsponge_kernels::rows_to_pairs, "compressed rows as (P, 2) pairs i < j sorted by i");
  module.def("prepare_pairs", &mindsponge_kernels::prepare_pairs, "pair parameters and shifts, LJ pairs first, by first atom");
  module.def("pme_spread", &mindsponge_kernels::pme_spread, "B-spline charge spreading onto the PME grid");
  module.def("pme_gather", &mindsponge_kernels::pme_gather, "PME energy gradient wrt the scaled coordinates");
}
