// Compiled CPU kernels of mindsponge's non-bonded forces (see mindsponge/_kernels/__init__.py): this file
// holds the pair kernels and the module's bindings; cell_search.cpp the cell search and the pair set, pme.cpp PME.
//
// pair_forces : Lennard-Jones + Coulomb energies of a pair list and their position gradients in one pass
// neighbor_forces: the same over a compressed-row neighbour list with per-atom parameters (vectorised)
// cell_neighbors: half-shell cell-list search of the pairs within the list cutoff, exclusions removed, as
//                compressed rows for neighbor_forces (rows_to_pairs: the same as (P, 2) pairs i < j); any
//                box valid for the cutoff (the half shell reaches through as many periodic images as needed)
// prepare_pairs: per-pair parameters and minimum-image lattice shifts, LJ pairs first
// pme_spread  : B-spline charge spreading onto the PME grid
// pme_gather  : gradient of the PME energy with respect to the scaled (grid) coordinates
//
// Every kernel is templated on the floating type of the positions (float or double) and
// parallelised with at::parallel_for (thread-local accumulation buffers, reduced at the end),
// so it follows torch.set_num_threads. Energies are accumulated in double.
#include <torch/extension.h>

#include <ATen/Parallel.h>

#if defined(__AVX__)
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

// exp(x) in float for x <= 88, branch-free so that loops over it vectorise (Cephes expf: x = n ln 2 + r with
// |r| <= ln 2 / 2 and a degree-6 polynomial, relative error ~1e-7; results below ~1e-38 flush to 0)
inline float fast_exp(float x) {
  x = x > -87.0f ? x : -87.0f;
  const float n = round_to_integer(x * 1.44269504088896341f);
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  bits += int32_t(n) << 23;
  float result;
  std::memcpy(&result, &bits, sizeof result);
  return result;
}

// erfc(x) for x >= 0 and the Gaussian exp(-x^2). float: the Chebyshev fit of Numerical Recipes' erfcc
// (relative error below 1.2e-7 everywhere, float round-off) with fast_exp; double: libm
inline void erfc_and_gaussian(float x, float& value, float& gaussian) {
  const float t = 1.0f / (1.0f + 0.5f * x);
  const float poly =
      -1.26551223f +
      t * (1.00002368f +
           t * (0.37409196f +
                t * (0.09678418f +
                     t * (-0.18628806f +
                          t * (0.27886807f +
                               t * (-1.13520398f + t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
  gaussian = fast_exp(-x * x);
  value = t * fast_exp(poly - x * x);
}
inline void erfc_and_gaussian(double x, double& value, double& gaussian) {
  value = std::erfc(x);
  gaussian = std::exp(-x * x);
}

// Direct-space LJ + Coulomb over a half neighbour list in compressed rows: the neighbours of atom i are
// neighbors[starts[i]:starts[i + 1]], each pair listed once. Parameters are per atom (Lorentz-Berthelot: sigma_ij = h_i + h_j,
// 4 eps_ij = e_i e_j, f q_i q_j = c_i c_j), displacements take the minimum image of a reduced box on the fly.
// Each row is processed in three passes so that the arithmetic vectorises: gather the neighbours into
// contiguous buffers (positions and parameters packed per atom, one cache line; in float with AVX, eight
// records loaded whole and transposed in registers: 10-13 % faster energy+forces than element by element,
// where AVX-512 gathers were 3-10 % slower on AMD Zen 4), compute all pair terms (SIMD), scatter the forces
// on the neighbours (element by element: four partners at a time with masked 3-float AVX-512 loads and
// stores took 20-25 % longer on Zen 4). `combined`: one gradient of E_LJ + E_Coulomb (3 values per atom,
// half the scattering); otherwise dE_LJ/dx and dE_Coulomb/dx apart (6 values per atom).
template <typename T, bool periodic, int64_t kind, bool switching, bool combined>
void neighbor_forces_impl(const T* positions, const T* box, const int64_t* starts, const int32_t* neighbors,
                          const T* scaled_charges, const T* half_sigma, const T* epsilon_root2, int64_t n_atoms,
                          PairOptions options, double* energies, T* gradients) {
  constexpr int64_t kPacked = 8, kGradients = combined ? 3 : 6;
  std::vector<T> packed(kPacked * n_atoms);  // x, y, z, f^1/2 q, sigma / 2, 2 eps^1/2 (and padding)
  at::parallel_for(0, n_atoms, 2048, [&](int64_t begin, int64_t end) {
    for (int64_t a = begin; a < end; ++a) {
      T* atom = packed.data() + kPacked * a;
      atom[0] = positions[3 * a];
      atom[1] = positions[3 * a + 1];
      atom[2] = positions[3 * a + 2];
      atom[3] = scaled_charges[a];
      atom[4] = half_sigma[a];
      atom[5] = epsilon_root2[a];
    }
  });
  const T ax = periodic ? box[0] : T(0), bx = periodic ? box[3] : T(0), by = periodic ? box[4] : T(0);
  const T cx = periodic ? box[6] : T(0), cy = periodic ? box[7] : T(0), cz = periodic ? box[8] : T(0);
  const T inverse_ax = periodic ? T(1) / ax : T(0), inverse_by = periodic ? T(1) / by : T(0);
  const T inverse_cz = periodic ? T(1) / cz : T(0);
  const bool has_cutoff = options.cutoff > 0;
  const T cutoff2 = has_cutoff ? T(options.cutoff * options.cutoff) : std::numeric_limits<T>::infinity();
  const T switch_distance = T(options.switch_distance), width = T(options.cutoff - options.switch_distance);
  const T alpha = T(options.alpha), krf = T(options.krf), crf = T(options.crf);
  const T gaussian_prefactor = T(options.alpha * kTwoOverSqrtPi);
  const int64_t n_pairs = starts[n_atoms];
  const int threads = at::get_num_threads();
  // chunks of about equal numbers of pairs (rows differ in length), a few per thread
  const int64_t n_chunks = std::max<int64_t>(1, std::min<int64_t>(n_atoms, 8 * threads));
  std::vector<int64_t> row_bounds(n_chunks + 1, n_atoms);
  row_bounds[0] = 0;
  for (int64_t c = 1; c < n_chunks; ++c)
    row_bounds[c] = std::lower_bound(starts, starts + n_atoms, (n_pairs * c) / n_chunks) - starts;
  const int64_t stride = kGradients * n_atoms;
  at::parallel_for(0, n_chunks, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
    const int thread = at::get_thread_num();
    // per atom: dE/dx (combined), or dE_LJ/dx (3 values) then dE_Coulomb/dx (3)
    T* gradient = gradients + thread * stride;
    double energy_lj = 0.0, energy_coulomb = 0.0;
    std::vector<T> buffer;
    for (int64_t row = row_bounds[chunk_begin]; row < row_bounds[chunk_end]; ++row) {
      const int64_t begin = starts[row], count = starts[row + 1] - begin;
      if (count == 0) continue;
      if (int64_t(buffer.size()) < 9 * count) buffer.resize(9 * count);
      T* dx = buffer.data();
      T* dy = dx + count;
      T* dz = dy + count;
      T* charge = dz + count;
      T* sigma = charge + count;
      T* epsilon = sigma + count;
      T* force_lj = epsilon + count;  // -(dE/dr)/r of the pair
      T* force_coulomb = force_lj + count;
      const T* atom_i = packed.data() + kPacked * row;
      const T xi = atom_i[0], yi = atom_i[1], zi = atom_i[2];
      const T ci = atom_i[3], hi = atom_i[4], ei = atom_i[5];
      const int32_t* partners = neighbors + begin;
      int64_t gathered = 0;
#if defined(__AVX__)
      if constexpr (std::is_same_v<T, float>) {  // 8 partners' packed records at a time, transposed 8 x 8
        const __m256 xv = _mm256_set1_ps(xi), yv = _mm256_set1_ps(yi), zv = _mm256_set1_ps(zi);
        const float* base = packed.data();
        for (; gathered + 8 <= count; gathered += 8) {
          const int32_t* p = partners + gathered;
          const __m256 r0 = _mm256_loadu_ps(base + kPacked * int64_t(p[0]));
          const __m256 r1 = _mm256_loadu_ps(base + kPacked * int64_t(p[1]));
          const __m256 r2 = _mm256_loadu_ps(base + kPacked * int64_t(p[2]));
          const __m256 r3 = _mm256_loadu_ps(base + kPacked * int64_t(p[3]));
          const __m256 r4 = _mm256_loadu_ps(base + kPacked * int64_t(p[4]));
          const __m256 r5 = _mm256_loadu_ps(base + kPacked * int64_t(p[5]));
          const __m256 r6 = _mm256_loadu_ps(base + kPacked * int64_t(p[6]));
          const __m256 r7 = _mm256_loadu_ps(base + kPacked * int64_t(p[7]));
          const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
          const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
          const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
          const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
          const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
          const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
          const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
          const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
          _mm256_storeu_ps(dx + gathered, _mm256_sub_ps(_mm256_permute2f128_ps(u0, u4, 0x20), xv));
          _mm256_storeu_ps(dy + gathered, _mm256_sub_ps(_mm256_permute2f128_ps(u1, u5, 0x20), yv));
          _mm256_storeu_ps(dz + gathered, _mm256_sub_ps(_mm256_permute2f128_ps(u2, u6, 0x20), zv));
          _mm256_storeu_ps(charge + gathered, _mm256_permute2f128_ps(u3, u7, 0x20));
          _mm256_storeu_ps(sigma + gathered, _mm256_permute2f128_ps(u0, u4, 0x31));
          _mm256_storeu_ps(epsilon + gathered, _mm256_permute2f128_ps(u1, u5, 0x31));
        }
      }
#endif
      for (int64_t k = gathered; k < count; ++k) {
        const T* atom_j = packed.data() + kPacked * int64_t(partners[k]);
        dx[k] = atom_j[0] - xi;
        dy[k] = atom_j[1] - yi;
        dz[k] = atom_j[2] - zi;
        charge[k] = atom_j[3];
        sigma[k] = atom_j[4];
        epsilon[k] = atom_j[5];
      }
      // the geometry first (minimum image, distances): two SIMD loops of fewer live values than one
#pragma omp simd
      for (int64_t k = 0; k < count; ++k) {
        T x = dx[k], y = dy[k], z = dz[k];
        if constexpr (periodic) {  // mindsponge.space.minimum_image: reduced box, axes 2, 1, 0
          const T image_z = round_to_integer(z * inverse_cz);
          x -= image_z * cx;
          y -= image_z * cy;
          z -= image_z * cz;
          const T image_y = round_to_integer(y * inverse_by);
          x -= image_y * bx;
          y -= image_y * by;
          x -= round_to_integer(x * inverse_ax) * ax;
          dx[k] = x;
          dy[k] = y;
          dz[k] = z;
        }
        const T r2 = x * x + y * y + z * z;
        force_lj[k] = r2;
        force_coulomb[k] = (r2 < cutoff2 ? T(1) : T(0)) / std::sqrt(r2);  // 1 / r within the cutoff, else 0
      }
      T row_lj = 0, row_coulomb = 0;
#pragma omp simd reduction(+ : row_lj)
      for (int64_t k = 0; k < count; ++k) {  // Lennard-Jones (sigma_ij = h_i + h_j, 4 eps_ij = e_i e_j)
        const T r2 = force_lj[k], inverse_r = force_coulomb[k];
        const T inverse_r2 = inverse_r * inverse_r;
        const T sigma_ij = hi + sigma[k];
        const T s2 = sigma_ij * sigma_ij * inverse_r2;
        const T s6 = s2 * s2 * s2;
        const T epsilon4 = ei * epsilon[k];
        T e_lj = epsilon4 * (s6 * s6 - s6);
        T f_lj = epsilon4 * (T(12) * s6 * s6 - T(6) * s6) * inverse_r2;
        if constexpr (switching) {
          const T r = r2 * inverse_r;
          const T scaled = (r - switch_distance) / width;
          const T u = scaled < T(0) ? T(0) : (scaled > T(1) ? T(1) : scaled);
          const T switch_value = T(1) + u * u * u * (T(-10) + u * (T(15) - T(6) * u));
          const T switch_derivative = u * u * (T(-30) + u * (T(60) - T(30) * u)) / width;
          f_lj = f_lj * switch_value - e_lj * switch_derivative * inverse_r;
          e_lj *= switch_value;
        }
        row_lj += e_lj;
        force_lj[k] = f_lj;
        sigma[k] = r2;  // r^2 for the Coulomb loop (sigma_j is no longer needed)
      }
#pragma omp simd reduction(+ : row_coulomb)
      for (int64_t k = 0; k < count; ++k) {  // Coulomb
        const T r2 = sigma[k], inverse_r = force_coulomb[k];
        const T inverse_r2 = inverse_r * inverse_r;
        const T qq = inverse_r > T(0) ? ci * charge[k] : T(0);
        T e_coulomb, f_coulomb;
        if constexpr (kind == kEwald) {
          T erfc_value, gaussian;
          erfc_and_gaussian(alpha * r2 * inverse_r, erfc_value, gaussian);
          e_coulomb = qq * erfc_value * inverse_r;
          f_coulomb = (e_coulomb + qq * gaussian_prefactor * gaussian) * inverse_r2;
        } else if constexpr (kind == kReactionField) {
          e_coulomb = qq * (inverse_r + krf * r2 - crf);
          f_coulomb = qq * (inverse_r * inverse_r2 - T(2) * krf);
        } else {
          e_coulomb = qq * inverse_r;
          f_coulomb = e_coulomb * inverse_r2;
        }
        row_coulomb += e_coulomb;
        force_coulomb[k] = combined ? f_coulomb + force_lj[k] : f_coulomb;
      }
      energy_lj += double(row_lj);
      energy_coulomb += double(row_coulomb);
      if constexpr (combined) {
        T first[3] = {0, 0, 0};
        for (int64_t k = 0; k < count; ++k)
          add_pair_gradient(first, gradient + 3 * int64_t(partners[k]), dx[k], dy[k], dz[k], force_coulomb[k]);
        for (int d = 0; d < 3; ++d) gradient[3 * row + d] += first[d];
      } else {
        T first_lj[3] = {0, 0, 0}, first_coulomb[3] = {0, 0, 0};
        for (int64_t k = 0; k < count; ++k) {
          T* gradient_j = gradient + 6 * int64_t(partners[k]);
          add_pair_gradient(first_lj, gradient_j, dx[k], dy[k], dz[k], force_lj[k]);
          add_pair_gradient(first_coulomb, gradient_j + 3, dx[k], dy[k], dz[k], force_coulomb[k]);
        }
        for (int d = 0; d < 3; ++d) {
          gradient[6 * row + d] += first_lj[d];
          gradient[6 * row + 3 + d] += first_coulomb[d];
        }
      }
    }
    energies[2 * thread] += energy_lj;
    energies[2 * thread + 1] += energy_coulomb;
  });
}

// (energies (2,) float64: LJ, Coulomb; gradients (2, N, 3): dE_LJ/dx, dE_Coulomb/dx) as pair_forces, or with
// `combined` gradients (1, N, 3): d(E_LJ + E_Coulomb)/dx
std::vector<torch::Tensor> neighbor_forces(torch::Tensor positions, torch::Tensor box, torch::Tensor starts,
                                           torch::Tensor neighbors, torch::Tensor scaled_charges,
                                           torch::Tensor half_sigma, torch::Tensor epsilon_root2, double cutoff,
                                           double switch_distance, int64_t kind, double alpha, double krf,
                                           double crf, bool combined) {
  TORCH_CHECK(kind == kPlain || kind == kReactionField || kind == kEwald,
              "neighbor_forces: kind must be plain, reaction field or Ewald");
  positions = positions.contiguous();
  const int64_t n_atoms = positions.size(0);
  TORCH_CHECK(starts.numel() == n_atoms + 1, "neighbor_forces: starts must have N + 1 entries");
  const bool periodic = box.numel() > 0;
  if (periodic) box = box.to(positions.scalar_type()).contiguous();
  starts = starts.contiguous();
  neighbors = neighbors.contiguous();
  const int threads = at::get_num_threads();
  auto energies = torch::zeros({threads, 2}, positions.options().dtype(torch::kFloat64));
  auto gradients = torch::zeros({threads, n_atoms, combined ? 1 : 2, 3}, positions.options());
  const PairOptions options{cutoff, switch_distance, kind, alpha, krf, crf};
  AT_DISPATCH_FLOATING_TYPES(positions.scalar_type(), "neighbor_forces", [&] {
    const scalar_t* charges_data = scaled_charges.contiguous().data_ptr<scalar_t>();
    const scalar_t* sigma_data = half_sigma.contiguous().data_ptr<scalar_t>();
    const scalar_t* epsilon_data = epsilon_root2.contiguous().data_ptr<scalar_t>();
    auto run_combined = [&](auto periodic_tag, auto kind_tag, auto switching_tag, auto combined_tag) {
      neighbor_forces_impl<scalar_t, decltype(periodic_tag)::value, decltype(kind_tag)::value,
                           decltype(switching_tag)::value, decltype(combined_tag)::value>(
          positions.data_ptr<scalar_t>(), periodic ? box.data_ptr<scalar_t>() : nullptr,
          starts.data_ptr<int64_t>(), neighbors.data_ptr<int32_t>(), charges_data, sigma_data, epsilon_data,
          n_atoms, options, energies.data_ptr<double>(), gradients.data_ptr<scalar_t>());
    };
    auto run = [&](auto periodic_tag, auto kind_tag, auto switching_tag) {
      if (combined)
        run_combined(periodic_tag, kind_tag, switching_tag, std::true_type{});
      else
        run_combined(periodic_tag, kind_tag, switching_tag, std::false_type{});
    };
    auto with_switching = [&](auto periodic_tag, auto kind_tag) {
      if (switch_distance >= 0)
        run(periodic_tag, kind_tag, std::true_type{});
      else
        run(periodic_tag, kind_tag, std::false_type{});
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
  });
  return {energies.sum(0), gradients.sum(0).permute({1, 0, 2})};
}

}  // namespace

// defined in cell_search.cpp and pme.cpp (one module, three translation units)
namespace mindsponge_kernels {
std::vector<torch::Tensor> cell_neighbors(torch::Tensor wrapped, torch::Tensor box, torch::Tensor cell_xyz,
                                          std::vector<int64_t> n_cells, std::vector<int64_t> reach,
                                          double list_cutoff, torch::Tensor exclusion_starts,
                                          torch::Tensor exclusion_partners, bool deduplicate);
torch::Tensor rows_to_pairs(torch::Tensor starts, torch::Tensor partners);
std::vector<torch::Tensor> prepare_pairs(torch::Tensor pairs, torch::Tensor reference, torch::Tensor box,
                                         torch::Tensor charges, torch::Tensor sigma, torch::Tensor epsilon,
                                         double coulomb_constant);
torch::Tensor pme_spread(torch::Tensor scaled, torch::Tensor charges, std::vector<int64_t> sizes, int64_t order);
torch::Tensor pme_gather(torch::Tensor potential, torch::Tensor scaled, torch::Tensor charges,
                         std::vector<int64_t> sizes, int64_t order);
}  // namespace mindsponge_kernels


PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("pair_forces", &pair_forces, "LJ + Coulomb energies and gradients of a pair list");
  module.def("neighbor_forces", &neighbor_forces, "LJ + Coulomb energies and gradients of a CSR neighbour list");
  module.def("cell_neighbors", &mindsponge_kernels::cell_neighbors, "cell-list search as compressed rows of neighbours");
  module.def("rows_to_pairs", &mindsponge_kernels::rows_to_pairs, "compressed rows as (P, 2) pairs i < j sorted by i");
  module.def("prepare_pairs", &mindsponge_kernels::prepare_pairs, "pair parameters and shifts, LJ pairs first, by first atom");
  module.def("pme_spread", &mindsponge_kernels::pme_spread, "B-spline charge spreading onto the PME grid");
  module.def("pme_gather", &mindsponge_kernels::pme_gather, "PME energy gradient wrt the scaled coordinates");
}
