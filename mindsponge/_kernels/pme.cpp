// PME charge spreading and gathering of mindsponge's non-bonded forces (see nonbonded.cpp, which binds
// these functions into one module with the pair kernels and the cell search).
#include <ATen/ATen.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace mindsponge_kernels {

// B-spline values M_p(t + k) and derivatives, k = 0..p-1 (as mindsponge.forcefield.ewald.bspline_weights)
template <typename T>
inline void bspline(T t, int order, T* values, T* derivatives) {
  T lower[16];
  values[0] = T(1);
  for (int k = 1; k < order; ++k) values[k] = T(0);
  for (int m = 2; m <= order; ++m) {
    for (int k = 0; k < m - 1; ++k) lower[k] = values[k];
    lower[m - 1] = T(0);
    for (int k = 0; k < m; ++k) {
      const T below = k > 0 ? lower[k - 1] : T(0);
      values[k] = ((t + T(k)) * lower[k] + (T(m) - t - T(k)) * below) / T(m - 1);
    }
  }
  if (derivatives != nullptr)
    for (int k = 0; k < order; ++k) derivatives[k] = lower[k] - (k > 0 ? lower[k - 1] : T(0));
}

// scaled: (N, 3) grid coordinates in [0, n_d); grid point floor(u) - k gets weight M_p(frac(u) + k)
template <typename T>
inline void spline_setup(const T* scaled, const std::vector<int64_t>& sizes, int order, int64_t* index,
                         T* values, T* derivatives) {
  for (int d = 0; d < 3; ++d) {
    const T u = scaled[d];
    const T base = std::floor(u);
    bspline(u - base, order, values + d * order, derivatives == nullptr ? nullptr : derivatives + d * order);
    const int64_t n = sizes[d];
    for (int k = 0; k < order; ++k) index[d * order + k] = (((int64_t(base) - k) % n) + n) % n;
  }
}

// runs body(order_tag) with the spline order as a compile-time constant for OpenMM's and mindsponge's default
// order 5 (the loops over the p^3 grid points unroll), as a run-time value (tag value 0) otherwise
template <typename Body>
inline void with_order(int64_t order, Body&& body) {
  if (order == 5)
    body(std::integral_constant<int, 5>{});
  else
    body(std::integral_constant<int, 0>{});
}

at::Tensor pme_spread(at::Tensor scaled, at::Tensor charges, std::vector<int64_t> sizes, int64_t order) {
  TORCH_CHECK(order >= 2 && order <= 15, "pme_spread: order must lie in [2, 15]");
  scaled = scaled.contiguous();
  charges = charges.contiguous();
  const int64_t n_atoms = scaled.size(0), grid_size = sizes[0] * sizes[1] * sizes[2];
  // groups of atoms, each spreading onto its own grid; how many is fixed by the atom count (never the thread
  // count), and the grids are added in group order, so that the charge grid is the same whatever the threads
  const int64_t n_groups = std::max<int64_t>(1, std::min<int64_t>(8, (n_atoms + 2047) / 2048));
  const int64_t per_group = (n_atoms + n_groups - 1) / n_groups;
  auto grids = at::zeros({n_groups, grid_size}, scaled.options());
  AT_DISPATCH_FLOATING_TYPES(scaled.scalar_type(), "pme_spread", [&] {
    const scalar_t* u = scaled.data_ptr<scalar_t>();
    const scalar_t* q = charges.data_ptr<scalar_t>();
    scalar_t* all_grids = grids.data_ptr<scalar_t>();
    with_order(order, [&](auto order_tag) {
      const int p = decltype(order_tag)::value > 0 ? decltype(order_tag)::value : int(order);
      at::parallel_for(0, n_groups, 1, [&](int64_t group_begin, int64_t group_end) {
       for (int64_t group = group_begin; group < group_end; ++group) {
        scalar_t* grid = all_grids + group * grid_size;
        int64_t index[3 * 16];
        scalar_t values[3 * 16];
        for (int64_t a = group * per_group; a < std::min(n_atoms, (group + 1) * per_group); ++a) {
          spline_setup<scalar_t>(u + 3 * a, sizes, p, index, values, nullptr);
          for (int i = 0; i < p; ++i) {
            const scalar_t qx = q[a] * values[i];
            const int64_t row_x = index[i] * sizes[1];
            for (int j = 0; j < p; ++j) {
              const scalar_t qxy = qx * values[p + j];
              const int64_t row_xy = (row_x + index[p + j]) * sizes[2];
              for (int k = 0; k < p; ++k) grid[row_xy + index[2 * p + k]] += qxy * values[2 * p + k];
            }
          }
        }
       }
      });
    });
    for (int64_t group = 1; group < n_groups; ++group) {
      const scalar_t* other = all_grids + group * grid_size;
      for (int64_t k = 0; k < grid_size; ++k) all_grids[k] += other[k];
    }
  });
  return grids[0].view({sizes[0], sizes[1], sizes[2]});
}

// (N, 3): q_a * dphi/du_d at each atom, u the scaled coordinates (the PME energy gradient wrt u)
at::Tensor pme_gather(at::Tensor potential, at::Tensor scaled, at::Tensor charges,
                         std::vector<int64_t> sizes, int64_t order) {
  TORCH_CHECK(order >= 2 && order <= 15, "pme_gather: order must lie in [2, 15]");
  potential = potential.contiguous();
  scaled = scaled.contiguous();
  charges = charges.contiguous();
  const int64_t n_atoms = scaled.size(0);
  auto gradient = at::empty({n_atoms, 3}, scaled.options());
  AT_DISPATCH_FLOATING_TYPES(scaled.scalar_type(), "pme_gather", [&] {
    const scalar_t* u = scaled.data_ptr<scalar_t>();
    const scalar_t* q = charges.data_ptr<scalar_t>();
    const scalar_t* phi = potential.data_ptr<scalar_t>();
    scalar_t* out = gradient.data_ptr<scalar_t>();
    with_order(order, [&](auto order_tag) {
      const int p = decltype(order_tag)::value > 0 ? decltype(order_tag)::value : int(order);
      at::parallel_for(0, n_atoms, 256, [&](int64_t begin, int64_t end) {
        int64_t index[3 * 16];
        scalar_t values[3 * 16], derivatives[3 * 16];
        for (int64_t a = begin; a < end; ++a) {
          spline_setup<scalar_t>(u + 3 * a, sizes, p, index, values, derivatives);
          scalar_t gx = 0, gy = 0, gz = 0;
          for (int i = 0; i < p; ++i) {
            const int64_t row_x = index[i] * sizes[1];
            for (int j = 0; j < p; ++j) {
              const int64_t row_xy = (row_x + index[p + j]) * sizes[2];
              scalar_t along_z = 0, along_dz = 0;
              for (int k = 0; k < p; ++k) {
                const scalar_t value = phi[row_xy + index[2 * p + k]];
                along_z += value * values[2 * p + k];
                along_dz += value * derivatives[2 * p + k];
              }
              gx += derivatives[i] * values[p + j] * along_z;
              gy += values[i] * derivatives[p + j] * along_z;
              gz += values[i] * values[p + j] * along_dz;
            }
          }
          out[3 * a] = q[a] * gx;
          out[3 * a + 1] = q[a] * gy;
          out[3 * a + 2] = q[a] * gz;
        }
      });
    });
  });
  return gradient;
}

}  // namespace mindsponge_kernels
