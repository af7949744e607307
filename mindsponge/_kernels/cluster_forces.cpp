// The cluster-pair kernel of mindsponge's non-bonded forces (nonbonded.cpp binds it): direct-space
// Lennard-Jones + Coulomb energies and gradients over the cluster-pair list of cluster_search.cpp, in SIMD.
#include <ATen/ATen.h>

#include <ATen/Parallel.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "pair_terms.h"

namespace mindsponge_kernels {
namespace {

constexpr int64_t kMaxGroups = 16, kSlotsPerGroup = 2048;  // the direct sum's groups of clusters

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
                         const T* half_sigma, const T* epsilon_root2, int64_t n_clusters,
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
  // groups of clusters with about the same number of cluster pairs, each summing into its own buffer; how many
  // is fixed by the size of the list, never by the thread count, so that the sums are the same whatever it is
  const int64_t n_groups = std::max<int64_t>(
      1, std::min<int64_t>({kMaxGroups, n_clusters, std::max<int64_t>(2, (n_slots + kSlotsPerGroup - 1) / kSlotsPerGroup)}));
  std::vector<int64_t> cluster_bounds(n_groups + 1, n_clusters);
  cluster_bounds[0] = 0;
  for (int64_t c = 1; c < n_groups; ++c)
    cluster_bounds[c] =
        std::lower_bound(pair_starts, pair_starts + n_clusters, (n_pairs * c) / n_groups) - pair_starts;
  // per group, in cluster order: [cluster][component][slot], components x, y, z (or LJ x, y, z, Coulomb x, y, z)
  std::vector<T> slot_gradients(size_t(n_groups) * kGradients * n_slots, T(0));
  std::vector<double> group_energies(2 * n_groups, 0.0);
  at::parallel_for(0, n_groups, 1, [&](int64_t group_begin, int64_t group_end) {
   for (int64_t group = group_begin; group < group_end; ++group) {
    T* gradient = slot_gradients.data() + size_t(group) * kGradients * n_slots;
    double energy_lj = 0.0, energy_coulomb = 0.0;
    for (int64_t cluster = cluster_bounds[group]; cluster < cluster_bounds[group + 1]; ++cluster) {
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
    group_energies[2 * group] = energy_lj;
    group_energies[2 * group + 1] = energy_coulomb;
   }
  });
  for (int64_t group = 0; group < n_groups; ++group) {
    energies[0] += group_energies[2 * group];
    energies[1] += group_energies[2 * group + 1];
  }
  // the groups' sums in group order, from cluster order to atom order
  at::parallel_for(0, n_clusters, 256, [&](int64_t begin, int64_t end) {
    for (int64_t cluster = begin; cluster < end; ++cluster)
      for (int64_t s = 0; s < C; ++s) {
        const int64_t atom = slot_atoms[C * cluster + s];
        if (atom < 0) continue;
        for (int64_t g = 0; g < kGradients; ++g) {
          T sum = 0;
          for (int64_t group = 0; group < n_groups; ++group)
            sum += slot_gradients[(size_t(group) * n_clusters + cluster) * kGradients * C + C * g + s];
          gradients[kGradients * atom + g] = sum;
        }
      }
  });
}

}  // namespace

// (energies (2,) float64: LJ, Coulomb; gradients (2, N, 3): dE_LJ/dx, dE_Coulomb/dx) as pair_forces, or with
// `combined` gradients (1, N, 3): d(E_LJ + E_Coulomb)/dx, over the cluster pairs of cluster_pairs
std::vector<at::Tensor> cluster_forces(at::Tensor positions, at::Tensor box, at::Tensor reference,
                                          at::Tensor slot_atoms, at::Tensor slot_shifts,
                                          at::Tensor pair_starts, at::Tensor pair_clusters,
                                          at::Tensor pair_shifts, at::Tensor pair_masks,
                                          at::Tensor scaled_charges, at::Tensor half_sigma,
                                          at::Tensor epsilon_root2, double cutoff, double switch_distance,
                                          int64_t kind, double alpha, double krf, double crf, bool combined) {
  TORCH_CHECK(kind == kPlain || kind == kReactionField || kind == kEwald,
              "cluster_forces: kind must be plain, reaction field or Ewald");
  positions = positions.contiguous();
  const int64_t n_atoms = positions.size(0), n_clusters = slot_atoms.numel() / kClusterSize;
  TORCH_CHECK(pair_starts.numel() == n_clusters + 1, "cluster_forces: pair_starts must have C + 1 entries");
  TORCH_CHECK(reference.size(0) == n_atoms,
              "cluster_forces: reference must hold the positions of the N atoms at the list's build");
  const bool periodic = box.numel() > 0;
  if (periodic) box = box.to(positions.scalar_type()).contiguous();
  reference = reference.to(positions.scalar_type()).contiguous();
  slot_shifts = slot_shifts.to(positions.scalar_type()).contiguous();
  pair_shifts = pair_shifts.to(positions.scalar_type()).contiguous();
  auto energies = at::zeros({2}, positions.options().dtype(at::kDouble));
  auto gradients = at::zeros({n_atoms, combined ? 1 : 2, 3}, positions.options());
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
          n_clusters, options, energies.data_ptr<double>(), gradients.data_ptr<scalar_t>());
    });
  });
  return {energies, gradients.permute({1, 0, 2})};
}

}  // namespace mindsponge_kernels
