// Cell-list neighbour search of mindsponge's non-bonded forces, and the pair set built from it (see
// nonbonded.cpp, which binds these functions into one module with the pair kernels and PME).
#include <ATen/ATen.h>

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

namespace mindsponge_kernels {

// the pairs found by one thread of the cell search, row by row: the partners of atom row_atoms[r] are
// partners[row_offsets[r]:row_offsets[r + 1]] (each pair once, in one of its two atoms' rows)
struct FoundRows {
  std::vector<int64_t> row_atoms, row_offsets{0};
  std::vector<int32_t> partners;
};

// The indices m < count (at most 128) of the candidates (bx[m], by[m], bz[m]) closer than sqrt(cutoff2) to
// (x, y, z), in increasing order, into `within` (room for count + 16 entries: the tail may be overwritten);
// returns how many. With AVX-512, 16 floats are compared and compressed at once (the scalar compaction was a
// third of the search's time; doubles, of precision="double", take the scalar loop).
template <typename T>
inline int64_t candidates_within(const T* bx, const T* by, const T* bz, int64_t count, T x, T y, T z, T cutoff2,
                                 int32_t* within) {
  int64_t found = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int64_t m = 0; m < count; m += 16) {
      const __mmask16 valid = __mmask16((1u << std::min<int64_t>(16, count - m)) - 1u);
      const __m512 dx = _mm512_sub_ps(_mm512_maskz_loadu_ps(valid, bx + m), _mm512_set1_ps(x));
      const __m512 dy = _mm512_sub_ps(_mm512_maskz_loadu_ps(valid, by + m), _mm512_set1_ps(y));
      const __m512 dz = _mm512_sub_ps(_mm512_maskz_loadu_ps(valid, bz + m), _mm512_set1_ps(z));
      const __m512 d2 = _mm512_fmadd_ps(dz, dz, _mm512_fmadd_ps(dy, dy, _mm512_mul_ps(dx, dx)));
      const __mmask16 close = _mm512_cmp_ps_mask(d2, _mm512_set1_ps(cutoff2), _CMP_LT_OQ) & valid;
      const __m512i index = _mm512_add_epi32(_mm512_set1_epi32(int32_t(m)), lane);
      // compressed in a register and stored whole (a compressing store to memory is microcoded on AMD Zen 4)
      _mm512_storeu_si512(within + found, _mm512_maskz_compress_epi32(close, index));
      found += __builtin_popcount(unsigned(close));
    }
    return found;
  }
#endif
  T distance2[128];
#pragma omp simd
  for (int64_t m = 0; m < count; ++m) {
    const T dx = bx[m] - x, dy = by[m] - y, dz = bz[m] - z;
    distance2[m] = dx * dx + dy * dy + dz * dz;
  }
  for (int64_t m = 0; m < count; ++m) {
    within[found] = int32_t(m);
    found += distance2[m] < cutoff2 ? 1 : 0;
  }
  return found;
}

// Cell search over a grid of n_cells[d] cells along each box vector (or bounding-box axis); the partners of an
// atom lie within reach[d] cells along axis d. The half shell is the set of cell offsets o with |o_d| <= reach[d]
// that are lexicographically >= 0. An offset leading out of the box is the periodic image of a cell shifted by
// box vectors, so when the box holds fewer than 2 reach + 1 cells along an axis, one cell is searched as several
// images: every image of an atom within the list cutoff is seen once, from one of the two atoms of the pair.
template <typename T>
void cell_search_impl(const T* wrapped, const T* box, const int64_t* cell_xyz, int64_t n_atoms,
                     const std::vector<int64_t>& n_cells, const std::vector<int64_t>& reach, double list_cutoff,
                     const int64_t* exclusion_starts, const int64_t* exclusion_partners,
                     std::vector<FoundRows>& found) {
  const int64_t nx = n_cells[0], ny = n_cells[1], nz = n_cells[2];
  const int64_t reach_x = reach[0], reach_y = reach[1], reach_z = reach[2];
  const int64_t total = nx * ny * nz;
  std::vector<int64_t> cell(n_atoms), starts(total + 1, 0), order(n_atoms);
  for (int64_t a = 0; a < n_atoms; ++a) {
    cell[a] = (cell_xyz[3 * a] * ny + cell_xyz[3 * a + 1]) * nz + cell_xyz[3 * a + 2];
    ++starts[cell[a] + 1];
  }
  for (int64_t c = 0; c < total; ++c) starts[c + 1] += starts[c];
  {
    std::vector<int64_t> next(starts.begin(), starts.end() - 1);
    for (int64_t a = 0; a < n_atoms; ++a) order[next[cell[a]]++] = a;  // stable counting sort
  }
  // the range of atom indices [low, high] that holds an atom and all its excluded partners: a partner outside it
  // (nearly all of them) needs no look-up in the exclusion table
  std::vector<std::array<int64_t, 2>> excluded_span(n_atoms);
  for (int64_t a = 0; a < n_atoms; ++a) excluded_span[a] = {a, a};
  for (int64_t a = 0; a < n_atoms; ++a)
    for (int64_t e = exclusion_starts[a]; e < exclusion_starts[a + 1]; ++e) {
      const int64_t b = exclusion_partners[e];
      excluded_span[a] = {std::min(excluded_span[a][0], b), std::max(excluded_span[a][1], b)};
      excluded_span[b] = {std::min(excluded_span[b][0], a), std::max(excluded_span[b][1], a)};
    }
  // sorted coordinates as three contiguous columns (x, y, z): the distance loop below vectorises
  std::vector<T> sorted(3 * n_atoms);
  T* sorted_x = sorted.data();
  T* sorted_y = sorted_x + n_atoms;
  T* sorted_z = sorted_y + n_atoms;
  for (int64_t k = 0; k < n_atoms; ++k) {
    sorted_x[k] = wrapped[3 * order[k]];
    sorted_y[k] = wrapped[3 * order[k] + 1];
    sorted_z[k] = wrapped[3 * order[k] + 2];
  }
  // the half shell as columns along z: the cell itself and the cells above it, then the columns with a
  // lexicographically positive (x, y) offset, each over z offsets in [-reach_z, reach_z]. Cells of a
  // column are contiguous in the sorted order (cell index (x ny + y) nz + z), so each column is a few
  // ranges of atoms (a new one where it wraps around the periodic box along z).
  std::vector<std::array<int64_t, 2>> columns = {{0, 0}};
  for (int64_t ox = 0; ox <= reach_x; ++ox)
    for (int64_t oy = -reach_y; oy <= reach_y; ++oy)
      if (ox > 0 || oy > 0) columns.push_back({ox, oy});
  const T cutoff2 = T(list_cutoff * list_cutoff);
  const bool periodic = box != nullptr;
  constexpr int64_t kBlock = 128;
  // about the number of pairs each thread will find (atoms per cell and pairs per atom from the density)
  const double volume = periodic ? std::abs(box[0] * box[4] * box[8]) : 0.0;
  if (periodic && volume > 0) {
    const double expected = 0.5 * n_atoms * (n_atoms / volume) * 4.18879 * std::pow(list_cutoff, 3);
    for (auto& rows : found) rows.partners.reserve(size_t(1.1 * expected / found.size()) + 64);
  }
  // image of a cell coordinate along axis d: (image, coordinate in the box)
  auto wrap = [&](int64_t coordinate, int d) -> std::array<int64_t, 2> {
    const int64_t n = n_cells[d];
    const int64_t image = coordinate >= 0 ? coordinate / n : -((n - 1 - coordinate) / n);
    return {image, coordinate - image * n};
  };
  struct Range {
    int64_t begin, end;
    T shift[3];
    bool from_self;  // starts in the atom's own cell: begins after the atom
  };
  at::parallel_for(0, total, 16, [&](int64_t begin, int64_t end) {
    FoundRows& rows = found[at::get_thread_num()];
    std::vector<Range> ranges;
    for (int64_t c = begin; c < end; ++c) {
      if (starts[c] == starts[c + 1]) continue;
      const int64_t cx = c / (ny * nz), cy = (c / nz) % ny, cz = c % nz;
      ranges.clear();
      for (const auto& column : columns) {
        const auto [image_x, x] = wrap(cx + column[0], 0);
        const auto [image_y, y] = wrap(cy + column[1], 1);
        if (!periodic && (image_x != 0 || image_y != 0)) continue;
        const bool own_column = column[0] == 0 && column[1] == 0;
        int64_t last_image = 0, last_z = -2;
        for (int64_t oz = own_column ? 0 : -reach_z; oz <= reach_z; ++oz) {
          const auto [image_z, z] = wrap(cz + oz, 2);
          if (!periodic && image_z != 0) continue;
          const int64_t cell_index = (x * ny + y) * nz + z;
          if (last_z >= 0 && image_z == last_image && z == last_z + 1) {
            ranges.back().end = starts[cell_index + 1];  // the next cell up the same column image
          } else {
            Range range{starts[cell_index], starts[cell_index + 1], {T(0), T(0), T(0)}, own_column && oz == 0};
            const int64_t images[3] = {image_x, image_y, image_z};
            for (int d = 0; d < 3 && periodic; ++d)
              for (int e = 0; e < 3; ++e) range.shift[e] += T(images[d]) * box[3 * d + e];
            ranges.push_back(range);
          }
          last_image = image_z;
          last_z = z;
        }
      }
      // one row per atom: its partners in the cell itself (later in the cell order) and the half shell
      for (int64_t a = starts[c]; a < starts[c + 1]; ++a) {
        const int64_t atom = order[a];
        const int64_t span_low = excluded_span[atom][0], span_high = excluded_span[atom][1];
        for (const Range& range : ranges) {
          const T x = sorted_x[a] - range.shift[0], y = sorted_y[a] - range.shift[1];
          const T z = sorted_z[a] - range.shift[2];
          const int64_t begin_b = range.from_self ? a + 1 : range.begin, end_b = range.end;
          for (int64_t block = begin_b; block < end_b; block += kBlock) {
            // squared distances of a block of candidates (SIMD), a branch-free compaction of those within
            // the cutoff, then the exclusion check
            const int64_t block_size = std::min(kBlock, end_b - block);
            int32_t within[kBlock + 16];
            const int64_t count = candidates_within(sorted_x + block, sorted_y + block, sorted_z + block,
                                                    block_size, x, y, z, cutoff2, within);
            // kept partners into `within` itself (entry m is read before entry kept <= m is written), then
            // appended at once
            int64_t kept = 0;
            for (int64_t m = 0; m < count; ++m) {
              const int64_t partner = order[block + within[m]];
              bool excluded = false;
              if (partner >= span_low && partner <= span_high) {
                const int64_t low = std::min(atom, partner), high = std::max(atom, partner);
                excluded = low == high;  // an atom's own image: only when the list cutoff exceeds a box width
                for (int64_t e = exclusion_starts[low]; e < exclusion_starts[low + 1]; ++e)
                  excluded |= exclusion_partners[e] == high;
              }
              within[kept] = int32_t(partner);  // int32: checked N < 2^31
              kept += excluded ? 0 : 1;
            }
            rows.partners.insert(rows.partners.end(), within, within + kept);
          }
        }
        rows.row_atoms.push_back(order[a]);
        rows.row_offsets.push_back(int64_t(rows.partners.size()));
      }
    }
  });
}

// the pairs within list_cutoff found by the cell search, by thread
std::vector<FoundRows> search_cells(at::Tensor wrapped, at::Tensor box, at::Tensor cell_xyz,
                                    const std::vector<int64_t>& n_cells, const std::vector<int64_t>& reach,
                                    double list_cutoff, at::Tensor exclusion_starts,
                                    at::Tensor exclusion_partners) {
  wrapped = wrapped.contiguous();
  cell_xyz = cell_xyz.contiguous();
  exclusion_starts = exclusion_starts.contiguous();
  exclusion_partners = exclusion_partners.contiguous();
  const bool periodic = box.numel() > 0;
  if (periodic) box = box.to(wrapped.scalar_type()).contiguous();
  TORCH_CHECK(wrapped.size(0) < (int64_t(1) << 31), "cell search: at most 2^31 - 1 atoms");
  TORCH_CHECK(n_cells.size() == 3 && reach.size() == 3, "cell search: n_cells and reach need 3 entries");
  for (int d = 0; d < 3; ++d)
    TORCH_CHECK(n_cells[d] >= 1 && reach[d] >= 1, "cell search: n_cells and reach must be positive");
  std::vector<FoundRows> found(at::get_num_threads());
  AT_DISPATCH_FLOATING_TYPES(wrapped.scalar_type(), "cell_search", [&] {
    cell_search_impl<scalar_t>(wrapped.data_ptr<scalar_t>(), periodic ? box.data_ptr<scalar_t>() : nullptr,
                              cell_xyz.data_ptr<int64_t>(), wrapped.size(0), n_cells, reach, list_cutoff,
                              exclusion_starts.data_ptr<int64_t>(), exclusion_partners.data_ptr<int64_t>(),
                              found);
  });
  return found;
}

at::Tensor rows_to_pairs(at::Tensor starts, at::Tensor partners);

// compressed rows (a half list) with every pair once: rows of i < j pairs, each row sorted and without repeats
std::vector<at::Tensor> unique_rows(at::Tensor starts, at::Tensor partners) {
  const int64_t n_atoms = starts.size(0) - 1;
  const auto pairs = rows_to_pairs(starts, partners);  // i < j, by i
  const int64_t* pair = pairs.data_ptr<int64_t>();
  auto unique_starts = at::zeros({n_atoms + 1}, at::kLong);
  int64_t* start = unique_starts.data_ptr<int64_t>();
  std::vector<int32_t> sorted(pairs.size(0));
  int64_t begin = 0, kept = 0;
  for (int64_t i = 0; i < n_atoms; ++i) {
    int64_t end = begin;
    while (end < pairs.size(0) && pair[2 * end] == i) {
      sorted[end] = int32_t(pair[2 * end + 1]);
      ++end;
    }
    std::sort(sorted.begin() + begin, sorted.begin() + end);
    const auto last = std::unique(sorted.begin() + begin, sorted.begin() + end);
    kept = std::copy(sorted.begin() + begin, last, sorted.begin() + kept) - sorted.begin();
    start[i + 1] = kept;
    begin = end;
  }
  auto unique_partners = at::empty({kept}, at::kInt);
  std::copy(sorted.begin(), sorted.begin() + kept, unique_partners.data_ptr<int32_t>());
  return {unique_starts, unique_partners};
}

// the pairs within list_cutoff as compressed rows by atom, (starts (N + 1,) int64, partners (P,) int32): the partners of
// atom i are partners[starts[i]:starts[i + 1]], each pair in one of its two rows (a half list, not i < j),
// rows copied whole from the search. With `deduplicate` (needed when the list cutoff exceeds half the smallest
// box width, so that two images of one partner can both be within it), a pair found through several images is
// kept once, in rows of i < j.
std::vector<at::Tensor> cell_neighbors(at::Tensor wrapped, at::Tensor box, at::Tensor cell_xyz,
                                          std::vector<int64_t> n_cells, std::vector<int64_t> reach,
                                          double list_cutoff, at::Tensor exclusion_starts,
                                          at::Tensor exclusion_partners, bool deduplicate) {
  const auto found = search_cells(wrapped, box, cell_xyz, n_cells, reach, list_cutoff, exclusion_starts,
                                  exclusion_partners);
  const int64_t n_atoms = wrapped.size(0);
  auto starts = at::zeros({n_atoms + 1}, at::kLong);
  int64_t* start = starts.data_ptr<int64_t>();
  for (const auto& rows : found)
    for (size_t r = 0; r < rows.row_atoms.size(); ++r)
      start[rows.row_atoms[r] + 1] = rows.row_offsets[r + 1] - rows.row_offsets[r];
  for (int64_t a = 0; a < n_atoms; ++a) start[a + 1] += start[a];
  auto partners = at::empty({start[n_atoms]}, at::kInt);
  int32_t* out = partners.data_ptr<int32_t>();
  at::parallel_for(0, int64_t(found.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const FoundRows& rows = found[t];
      for (size_t r = 0; r < rows.row_atoms.size(); ++r)
        std::copy(rows.partners.begin() + rows.row_offsets[r], rows.partners.begin() + rows.row_offsets[r + 1],
                  out + start[rows.row_atoms[r]]);
    }
  });
  if (deduplicate) return unique_rows(starts, partners);
  return {starts, partners};
}

// compressed rows (starts (N + 1,), partners (P,) int32; a half list) as (P, 2) int64 pairs i < j sorted by i,
// by a counting sort (stable: within each i in the order of the rows)
at::Tensor rows_to_pairs(at::Tensor starts, at::Tensor partners) {
  starts = starts.contiguous();
  partners = partners.contiguous();
  const int64_t n_atoms = starts.size(0) - 1;
  const int64_t* start = starts.data_ptr<int64_t>();
  const int32_t* partner = partners.data_ptr<int32_t>();
  std::vector<int64_t> next(n_atoms + 1, 0);
  for (int64_t a = 0; a < n_atoms; ++a)
    for (int64_t k = start[a]; k < start[a + 1]; ++k) ++next[std::min<int64_t>(a, partner[k]) + 1];
  for (int64_t a = 0; a < n_atoms; ++a) next[a + 1] += next[a];
  auto result = at::empty({start[n_atoms], 2}, starts.options());
  int64_t* out = result.data_ptr<int64_t>();
  for (int64_t a = 0; a < n_atoms; ++a)
    for (int64_t k = start[a]; k < start[a + 1]; ++k) {
      const int64_t i = std::min<int64_t>(a, partner[k]), j = std::max<int64_t>(a, partner[k]);
      const int64_t position = next[i]++;
      out[2 * position] = i;
      out[2 * position + 1] = j;
    }
  return result;
}

// Pairs with Lennard-Jones first (stable partition: the input order, by first atom from the neighbour list,
// is kept within each group) and their parameters: (first, second, f q_i q_j, sigma_ij^2 and 4 eps_ij of the
// LJ prefix, (3, P) minimum-image shifts of the reference displacements; empty without a box).
// Lorentz-Berthelot combination, as Nonbonded._make_pairs.
std::vector<at::Tensor> prepare_pairs(at::Tensor pairs, at::Tensor reference, at::Tensor box,
                                         at::Tensor charges, at::Tensor sigma, at::Tensor epsilon,
                                         double coulomb_constant) {
  pairs = pairs.contiguous();
  reference = reference.contiguous();
  charges = charges.contiguous();
  sigma = sigma.contiguous();
  epsilon = epsilon.contiguous();
  const bool periodic = box.numel() > 0;
  if (periodic) box = box.contiguous();
  const int64_t n_pairs = pairs.size(0);
  // the pairs in fixed chunks: count the LJ pairs of each chunk, then each chunk writes its LJ pairs
  // and its other pairs at their offsets (a stable partition without an index array)
  constexpr int64_t kChunks = 256;
  const int64_t chunk = std::max<int64_t>(1, (n_pairs + kChunks - 1) / kChunks);
  std::vector<int64_t> lj_offset(kChunks + 1, 0), other_offset(kChunks + 1, 0);
  auto first = at::empty({n_pairs}, pairs.options()), second = at::empty({n_pairs}, pairs.options());
  auto charge_products = at::empty({n_pairs}, charges.options());
  auto shifts = at::empty({periodic ? 3 : 0, n_pairs}, charges.options());
  at::Tensor sigma_squared, epsilon4;
  AT_DISPATCH_FLOATING_TYPES(charges.scalar_type(), "prepare_pairs", [&] {
    const int64_t* pair_data = pairs.data_ptr<int64_t>();
    const scalar_t* q = charges.data_ptr<scalar_t>();
    const scalar_t* s = sigma.data_ptr<scalar_t>();
    const scalar_t* e = epsilon.data_ptr<scalar_t>();
    auto has_lj = [&](int64_t p) { return e[pair_data[2 * p]] * e[pair_data[2 * p + 1]] != scalar_t(0); };
    at::parallel_for(0, kChunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        int64_t count = 0;
        for (int64_t p = c * chunk; p < std::min(n_pairs, (c + 1) * chunk); ++p) count += has_lj(p) ? 1 : 0;
        lj_offset[c + 1] = count;
        other_offset[c + 1] = std::max<int64_t>(0, std::min(n_pairs, (c + 1) * chunk) - c * chunk) - count;
      }
    });
    for (int64_t c = 0; c < kChunks; ++c) lj_offset[c + 1] += lj_offset[c];
    const int64_t n_lj = lj_offset[kChunks];
    other_offset[0] = n_lj;
    for (int64_t c = 0; c < kChunks; ++c) other_offset[c + 1] += other_offset[c];
    sigma_squared = at::empty({n_lj}, charges.options());
    epsilon4 = at::empty({n_lj}, charges.options());
    int64_t* first_out = first.data_ptr<int64_t>();
    int64_t* second_out = second.data_ptr<int64_t>();
    scalar_t* qq = charge_products.data_ptr<scalar_t>();
    scalar_t* sigma2 = sigma_squared.data_ptr<scalar_t>();
    scalar_t* eps4 = epsilon4.data_ptr<scalar_t>();
    scalar_t* shift = periodic ? shifts.data_ptr<scalar_t>() : nullptr;
    const scalar_t* x = periodic ? reference.data_ptr<scalar_t>() : nullptr;
    const scalar_t* b = periodic ? box.data_ptr<scalar_t>() : nullptr;
    const scalar_t constant = scalar_t(coulomb_constant);
    at::parallel_for(0, kChunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        int64_t next_lj = lj_offset[c], next_other = other_offset[c];
        for (int64_t p = c * chunk; p < std::min(n_pairs, (c + 1) * chunk); ++p) {
          const int64_t i = pair_data[2 * p], j = pair_data[2 * p + 1];
          const bool lj = has_lj(p);
          const int64_t k = lj ? next_lj++ : next_other++;
          first_out[k] = i;
          second_out[k] = j;
          qq[k] = constant * q[i] * q[j];
          if (lj) {
            const scalar_t sigma_ij = scalar_t(0.5) * (s[i] + s[j]);
            sigma2[k] = sigma_ij * sigma_ij;
            eps4[k] = scalar_t(4) * std::sqrt(e[i] * e[j]);
          }
          if (periodic) {  // mindsponge.space.minimum_image: reduced box, axes 2, 1, 0
            scalar_t direct[3], d[3];
            for (int a = 0; a < 3; ++a) direct[a] = d[a] = x[3 * j + a] - x[3 * i + a];
            for (int axis = 2; axis >= 0; --axis) {
              const scalar_t image = std::rint(d[axis] / b[4 * axis]);
              for (int a = 0; a < 3; ++a) d[a] -= image * b[3 * axis + a];
            }
            for (int a = 0; a < 3; ++a) shift[a * n_pairs + k] = d[a] - direct[a];
          }
        }
      }
    });
  });
  return {first, second, charge_products, sigma_squared, epsilon4, shifts};
}

}  // namespace mindsponge_kernels
