// Compiled CPU kernels of the constraints, see mindsponge/constraints.py for the methods.
//
// settle_positions : the analytic SETTLE position update of every water (Miyamoto & Kollman 1992)
// settle_velocities: the rigid-body velocity projection (RATTLE condition solved per water by Cramer's rule)
// shake_positions  : SHAKE of distance constraints, all multipliers of an iteration from the same positions
// rattle_velocities: the RATTLE velocity projection, iterated the same way
//
// All follow the pure torch code of mindsponge.constraints (Settle, Rattle) operation by operation. The
// SETTLE kernels take one water per iteration, parallelised over waters with at::parallel_for; SHAKE and
// RATTLE are serial loops over the constraints (a few hundred bonds to hydrogen: microseconds per
// iteration, where the torch code spends tens of microseconds per operation). They return updated copies.
#include <ATen/ATen.h>

#include "kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

namespace {

template <typename T>
inline void cross(const T* a, const T* b, T* out) {
  out[0] = a[1] * b[2] - a[2] * b[1];
  out[1] = a[2] * b[0] - a[0] * b[2];
  out[2] = a[0] * b[1] - a[1] * b[0];
}

template <typename T>
inline T dot(const T* a, const T* b) {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

template <typename T>
inline void normalise(T* a) {
  const T inverse = T(1) / std::sqrt(dot(a, a));
  for (int d = 0; d < 3; ++d) a[d] *= inverse;
}

// returns the index of the first water whose geometry had no solution, or -1
template <typename T>
int64_t settle_positions_impl(const T* reference, T* positions, const int64_t* atoms, const T* masses,
                              const T* oh_distance, const T* hh_distance, int64_t n_waters) {
  std::atomic<int64_t> failed{-1};
  at::parallel_for(0, n_waters, 256, [&](int64_t begin, int64_t end) {
    for (int64_t w = begin; w < end; ++w) {
      const int64_t o = atoms[3 * w], h1 = atoms[3 * w + 1], h2 = atoms[3 * w + 2];
      const T mass_o = masses[o], mass_h = masses[h1];
      const T total_mass = mass_o + T(2) * mass_h;
      const T rc = T(0.5) * hh_distance[w];
      const T height = std::sqrt(oh_distance[w] * oh_distance[w] - rc * rc);
      const T ra = T(2) * mass_h * height / total_mass;
      const T rb = height - ra;
      T center[3], a1[3], b1[3], c1[3], b0[3], c0[3];
      for (int d = 0; d < 3; ++d) {
        center[d] = (mass_o * positions[3 * o + d] + mass_h * (positions[3 * h1 + d] + positions[3 * h2 + d])) /
                    total_mass;
        a1[d] = positions[3 * o + d] - center[d];
        b1[d] = positions[3 * h1 + d] - center[d];
        c1[d] = positions[3 * h2 + d] - center[d];
        b0[d] = reference[3 * h1 + d] - reference[3 * o + d];
        c0[d] = reference[3 * h2 + d] - reference[3 * o + d];
      }
      T axis_x[3], axis_y[3], axis_z[3];
      cross(b0, c0, axis_z);
      cross(a1, axis_z, axis_x);
      cross(axis_z, axis_x, axis_y);
      normalise(axis_x);
      normalise(axis_y);
      normalise(axis_z);
      const T xb0 = dot(axis_x, b0), yb0 = dot(axis_y, b0);
      const T xc0 = dot(axis_x, c0), yc0 = dot(axis_y, c0);
      const T za1 = dot(axis_z, a1);
      const T xb1 = dot(axis_x, b1), yb1 = dot(axis_y, b1), zb1 = dot(axis_z, b1);
      const T xc1 = dot(axis_x, c1), yc1 = dot(axis_y, c1), zc1 = dot(axis_z, c1);
      const T sin_phi = za1 / ra;
      const T cos_phi = std::sqrt(T(1) - sin_phi * sin_phi);
      const T sin_psi = (zb1 - zc1) / (T(2) * rc * cos_phi);
      const T cos_psi = std::sqrt(T(1) - sin_psi * sin_psi);
      const T ya2 = ra * cos_phi, xb2 = -rc * cos_psi;
      const T t1 = -rb * cos_phi, t2 = rc * sin_psi * sin_phi;
      const T yb2 = t1 - t2, yc2 = t1 + t2;
      const T alpha = xb2 * (xb0 - xc0) + yb0 * yb2 + yc0 * yc2;
      const T beta = xb2 * (yc0 - yb0) + xb0 * yb2 + xc0 * yc2;
      const T gamma = xb0 * yb1 - xb1 * yb0 + xc0 * yc1 - xc1 * yc0;
      const T alpha_beta = alpha * alpha + beta * beta;
      const T sin_theta = (alpha * gamma - beta * std::sqrt(alpha_beta - gamma * gamma)) / alpha_beta;
      const T cos_theta = std::sqrt(T(1) - sin_theta * sin_theta);
      const T local[3][3] = {{-ya2 * sin_theta, ya2 * cos_theta, za1},
                             {xb2 * cos_theta - yb2 * sin_theta, xb2 * sin_theta + yb2 * cos_theta, zb1},
                             {-xb2 * cos_theta - yc2 * sin_theta, -xb2 * sin_theta + yc2 * cos_theta, zc1}};
      const int64_t index[3] = {o, h1, h2};
      bool finite = true;
      T placed[3][3];
      for (int atom = 0; atom < 3; ++atom)
        for (int d = 0; d < 3; ++d) {
          placed[atom][d] =
              center[d] + local[atom][0] * axis_x[d] + local[atom][1] * axis_y[d] + local[atom][2] * axis_z[d];
          finite = finite && std::isfinite(placed[atom][d]);
        }
      if (!finite) {
        int64_t expected = -1;
        while (expected == -1 || w < expected) {
          if (failed.compare_exchange_weak(expected, w)) break;
        }
        continue;
      }
      for (int atom = 0; atom < 3; ++atom)
        for (int d = 0; d < 3; ++d) positions[3 * index[atom] + d] = placed[atom][d];
    }
  });
  return failed.load();
}

template <typename T>
void settle_velocities_impl(const T* positions, T* velocities, const int64_t* atoms, const T* masses,
                            int64_t n_waters) {
  at::parallel_for(0, n_waters, 256, [&](int64_t begin, int64_t end) {
    for (int64_t w = begin; w < end; ++w) {
      const int64_t o = atoms[3 * w], h1 = atoms[3 * w + 1], h2 = atoms[3 * w + 2];
      const T inverse_o = T(1) / masses[o], inverse_h = T(1) / masses[h1];
      // constraints k: (O, H1), (O, H2), (H1, H2); r_k = x_j - x_i
      T bonds[3][3], relative[3][3];
      for (int d = 0; d < 3; ++d) {
        bonds[0][d] = positions[3 * h1 + d] - positions[3 * o + d];
        bonds[1][d] = positions[3 * h2 + d] - positions[3 * o + d];
        bonds[2][d] = positions[3 * h2 + d] - positions[3 * h1 + d];
        relative[0][d] = velocities[3 * h1 + d] - velocities[3 * o + d];
        relative[1][d] = velocities[3 * h2 + d] - velocities[3 * o + d];
        relative[2][d] = velocities[3 * h2 + d] - velocities[3 * h1 + d];
      }
      const T coupling[3][3] = {{inverse_o + inverse_h, inverse_o, -inverse_h},
                                {inverse_o, inverse_o + inverse_h, inverse_h},
                                {-inverse_h, inverse_h, T(2) * inverse_h}};
      T columns[3][3], rhs[3];  // columns[l][k] = matrix[k][l]
      for (int k = 0; k < 3; ++k) {
        for (int l = 0; l < 3; ++l) columns[l][k] = coupling[k][l] * dot(bonds[k], bonds[l]);
        rhs[k] = -dot(bonds[k], relative[k]);
      }
      T cofactors[3][3];  // Cramer's rule as _solve3: row i is orthogonal to every column but i
      cross(columns[1], columns[2], cofactors[0]);
      cross(columns[2], columns[0], cofactors[1]);
      cross(columns[0], columns[1], cofactors[2]);
      const T determinant = dot(columns[0], cofactors[0]);
      T multipliers[3];
      for (int k = 0; k < 3; ++k) multipliers[k] = dot(cofactors[k], rhs) / determinant;
      for (int d = 0; d < 3; ++d) {
        const T impulse0 = multipliers[0] * bonds[0][d], impulse1 = multipliers[1] * bonds[1][d];
        const T impulse2 = multipliers[2] * bonds[2][d];
        velocities[3 * o + d] += -(impulse0 + impulse1) * inverse_o;
        velocities[3 * h1 + d] += (impulse0 - impulse2) * inverse_h;
        velocities[3 * h2 + d] += (impulse1 + impulse2) * inverse_h;
      }
    }
  });
}

}  // namespace

namespace mindsponge_kernels {

// (constrained copy of positions, index of the first failed water or -1)
std::tuple<at::Tensor, int64_t> settle_positions(at::Tensor reference, at::Tensor positions,
                                                    at::Tensor atoms, at::Tensor masses,
                                                    at::Tensor oh_distance, at::Tensor hh_distance) {
  auto result = positions.contiguous().clone();
  reference = reference.to(positions.scalar_type()).contiguous();
  atoms = atoms.contiguous();
  int64_t failed = -1;
  AT_DISPATCH_FLOATING_TYPES(positions.scalar_type(), "settle_positions", [&] {
    auto masses_t = masses.to(positions.scalar_type()).contiguous();
    auto oh = oh_distance.to(positions.scalar_type()).contiguous();
    auto hh = hh_distance.to(positions.scalar_type()).contiguous();
    failed = settle_positions_impl<scalar_t>(reference.data_ptr<scalar_t>(), result.data_ptr<scalar_t>(),
                                             atoms.data_ptr<int64_t>(), masses_t.data_ptr<scalar_t>(),
                                             oh.data_ptr<scalar_t>(), hh.data_ptr<scalar_t>(), atoms.size(0));
  });
  return {result, failed};
}

// rigid copy of velocities
at::Tensor settle_velocities(at::Tensor positions, at::Tensor velocities, at::Tensor atoms,
                                at::Tensor masses) {
  auto result = velocities.contiguous().clone();
  positions = positions.to(velocities.scalar_type()).contiguous();
  atoms = atoms.contiguous();
  AT_DISPATCH_FLOATING_TYPES(velocities.scalar_type(), "settle_velocities", [&] {
    auto masses_t = masses.to(velocities.scalar_type()).contiguous();
    settle_velocities_impl<scalar_t>(positions.data_ptr<scalar_t>(), result.data_ptr<scalar_t>(),
                                     atoms.data_ptr<int64_t>(), masses_t.data_ptr<scalar_t>(), atoms.size(0));
  });
  return result;
}

// One iterative projection shared by SHAKE and RATTLE: each iteration computes every constraint's
// multiplier from the same values (as the torch code's vectorised update), then applies them all.
// `measure(c, multiplier)` returns the constraint's relative error and sets its multiplier; `direction`
// is the (C, 3) vector each multiplier moves along. Returns the iterations used, or -1 (not converged).
template <typename T, typename Measure>
int64_t iterate(T* values, const int64_t* pairs, const T* inverse_mass, const T* direction, int64_t count,
                double limit, int64_t max_iterations, std::vector<T>& multipliers, Measure measure) {
  for (int64_t iteration = 0; iteration < max_iterations; ++iteration) {
    double worst = 0.0;
    for (int64_t c = 0; c < count; ++c) worst = std::max(worst, measure(c, multipliers[c]));
    if (worst < limit) return iteration;
    for (int64_t c = 0; c < count; ++c) {
      const int64_t i = pairs[2 * c], j = pairs[2 * c + 1];
      for (int d = 0; d < 3; ++d) {
        const T step = multipliers[c] * direction[3 * c + d];
        values[3 * i + d] -= step * inverse_mass[i];
        values[3 * j + d] += step * inverse_mass[j];
      }
    }
  }
  return -1;
}

// (constrained copy of positions, iterations used or -1): SHAKE along the reference bond directions
std::tuple<at::Tensor, int64_t> shake_positions(at::Tensor reference, at::Tensor positions,
                                                   at::Tensor pairs, at::Tensor distances,
                                                   at::Tensor inverse_masses, double tolerance,
                                                   int64_t max_iterations) {
  auto result = positions.contiguous().clone();
  reference = reference.to(positions.scalar_type()).contiguous();
  pairs = pairs.contiguous();
  const int64_t count = pairs.size(0);
  int64_t used = 0;
  AT_DISPATCH_FLOATING_TYPES(positions.scalar_type(), "shake_positions", [&] {
    auto inverse = inverse_masses.to(positions.scalar_type()).contiguous();
    auto squared = distances.to(positions.scalar_type()).pow(2).contiguous();
    const int64_t* index = pairs.data_ptr<int64_t>();
    const scalar_t* ref = reference.data_ptr<scalar_t>();
    const scalar_t* w = inverse.data_ptr<scalar_t>();
    const scalar_t* d2 = squared.data_ptr<scalar_t>();
    scalar_t* x = result.data_ptr<scalar_t>();
    std::vector<scalar_t> old(3 * count), multipliers(count);
    for (int64_t c = 0; c < count; ++c)
      for (int d = 0; d < 3; ++d) old[3 * c + d] = ref[3 * index[2 * c + 1] + d] - ref[3 * index[2 * c] + d];
    used = iterate(x, index, w, old.data(), count, 2.0 * tolerance, max_iterations, multipliers,
                   [&](int64_t c, scalar_t& multiplier) {
                     const int64_t i = index[2 * c], j = index[2 * c + 1];
                     scalar_t bond[3];
                     for (int d = 0; d < 3; ++d) bond[d] = x[3 * j + d] - x[3 * i + d];
                     const scalar_t deficit = d2[c] - dot(bond, bond);
                     multiplier = deficit / (scalar_t(2) * dot(old.data() + 3 * c, bond) * (w[i] + w[j]));
                     return double(std::abs(deficit) / d2[c]);
                   });
  });
  return {result, used};
}

// (copy of velocities with no relative component along any constrained pair, iterations used or -1)
std::tuple<at::Tensor, int64_t> rattle_velocities(at::Tensor positions, at::Tensor velocities,
                                                     at::Tensor pairs, at::Tensor inverse_masses,
                                                     double tolerance, int64_t max_iterations) {
  auto result = velocities.contiguous().clone();
  positions = positions.to(velocities.scalar_type()).contiguous();
  pairs = pairs.contiguous();
  const int64_t count = pairs.size(0);
  int64_t used = 0;
  AT_DISPATCH_FLOATING_TYPES(velocities.scalar_type(), "rattle_velocities", [&] {
    auto inverse = inverse_masses.to(velocities.scalar_type()).contiguous();
    const int64_t* index = pairs.data_ptr<int64_t>();
    const scalar_t* x = positions.data_ptr<scalar_t>();
    const scalar_t* w = inverse.data_ptr<scalar_t>();
    scalar_t* v = result.data_ptr<scalar_t>();
    std::vector<scalar_t> bonds(3 * count), squared(count), multipliers(count);
    for (int64_t c = 0; c < count; ++c) {
      for (int d = 0; d < 3; ++d) bonds[3 * c + d] = x[3 * index[2 * c + 1] + d] - x[3 * index[2 * c] + d];
      squared[c] = dot(bonds.data() + 3 * c, bonds.data() + 3 * c);
    }
    used = iterate(v, index, w, bonds.data(), count, tolerance, max_iterations, multipliers,
                   [&](int64_t c, scalar_t& multiplier) {
                     const int64_t i = index[2 * c], j = index[2 * c + 1];
                     scalar_t relative[3];
                     for (int d = 0; d < 3; ++d) relative[d] = v[3 * j + d] - v[3 * i + d];
                     const scalar_t along = dot(bonds.data() + 3 * c, relative);
                     multiplier = -along / (squared[c] * (w[i] + w[j]));
                     return double(std::abs(along) / squared[c]);
                   });
  });
  return {result, used};
}

}  // namespace mindsponge_kernels
