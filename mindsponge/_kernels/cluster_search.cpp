// Cluster-pair list of mindsponge's non-bonded forces, in the spirit of GROMACS' nbnxm and OpenMM's CPU
// neighbour list (nonbonded.cpp binds it with the cluster kernel that uses it).
//
// Atoms are grouped into clusters of kClusterSize = 8 close atoms: the box is cut into columns along its first
// two vectors (about one cluster wide), the atoms of a column are sorted along the third vector (along z, in
// OpenMM's reduced form) and taken eight at a time (the last cluster of a column padded with empty slots).
// Each cluster then lists the clusters, each with the periodic shift it is seen through, that have at least
// one atom pair within the list cutoff, with a 64-bit mask of the atom pairs the kernel computes (bit 8 a + b:
// slot a of the cluster with slot b of the partner): empty slots, excluded pairs and, in a cluster with itself,
// the pairs b <= a are cleared. Each pair of clusters (with its shift) is listed once, from the lower index, so
// each atom pair is computed once per periodic image within the list cutoff; within the interaction cutoff (at
// most half the smallest of a_x, b_y, c_z) only one image of a pair can be, so no pair is counted twice.
#include <ATen/ATen.h>

#include <ATen/Parallel.h>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "pair_terms.h"

namespace mindsponge_kernels {
namespace {

struct FoundClusterPairs {  // the partners of the clusters of one chunk, cluster by cluster
  std::vector<int64_t> counts;
  std::vector<int32_t> partners;
  std::vector<std::array<double, 3>> shifts;
  std::vector<uint64_t> masks;
};

// 8 lanes of T (GCC's and Clang's vector extensions: one SIMD register where the machine has one)
template <typename T>
struct RowOf {
  typedef T type __attribute__((vector_size(kClusterSize * sizeof(T))));
};
template <typename T>
inline typename RowOf<T>::type load_row(const T* values) {
  typename RowOf<T>::type row;
  std::memcpy(&row, values, sizeof row);
  return row;
}

// bit b set where lane b of a comparison's result is true
template <typename Mask>
inline uint64_t lane_bits(Mask lanes) {
#if defined(__AVX__)
  if constexpr (sizeof(Mask) == 32 && sizeof(lanes[0]) == 4) return uint64_t(_mm256_movemask_ps(__m256(lanes)));
#endif
  uint64_t bits = 0;
  for (int64_t b = 0; b < kClusterSize; ++b) bits |= uint64_t(lanes[b] & 1) << b;
  return bits;
}

// the pairs of a cluster with itself: b > a (kAbove), and the pairs of an atom with itself (kDiagonal)
constexpr uint64_t kDiagonal = 0x8040201008040201ull;
constexpr uint64_t kAbove = 0x0080C0E0F0F8FCFEull;

inline int64_t floor_divide(int64_t value, int64_t n) { return value >= 0 ? value / n : -((n - 1 - value) / n); }

// The atoms in clusters (see the top of the file), with what the search needs: the columns' clusters, each
// cluster's bounding box, coordinates and filled slots
template <typename T>
struct Clusters {
  bool periodic;
  double vectors[3][3] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}};  // box vectors (rows, lower triangular)
  double width_a, width_b;                                   // widths perpendicular to the b-c and c-a faces
  int64_t na, nb;                                            // columns along a and along b
  std::vector<int64_t> column_clusters;  // the clusters of column c: column_clusters[c] to column_clusters[c + 1]
  std::vector<int32_t> slot_atoms, cluster_of, slot_of, cluster_column;
  std::vector<T> slot_shifts;   // (8 C, 3): the lattice vector that wrapped each slot's atom into the box
  std::vector<T> coordinates;   // per cluster, wrapped: x[8], y[8], z[8] (empty slots far away)
  std::vector<std::array<double, 6>> bounds;          // per cluster: low x, y, z, high x, y, z (wrapped)
  std::vector<uint64_t> filled_rows, filled_columns;  // filled slots as mask bits: 0xFF in byte a; bit b
};

template <typename T>
Clusters<T> make_clusters(const T* positions, const T* box, int64_t n_atoms, double list_cutoff) {
  Clusters<T> clusters;
  const bool periodic = clusters.periodic = box != nullptr;
  // the box vectors: the periodic box, or the atoms' bounding box without one
  auto& vectors = clusters.vectors;
  double lower[3] = {0, 0, 0};
  if (periodic) {
    for (int r = 0; r < 3; ++r)
      for (int d = 0; d < 3; ++d) vectors[r][d] = double(box[3 * r + d]);
  } else {
    for (int d = 0; d < 3; ++d) {
      double low = n_atoms > 0 ? double(positions[d]) : 0.0, high = low;
      for (int64_t a = 0; a < n_atoms; ++a) {
        low = std::min(low, double(positions[3 * a + d]));
        high = std::max(high, double(positions[3 * a + d]));
      }
      lower[d] = low;
      vectors[d][d] = std::max(high - low, list_cutoff);
    }
  }
  const double ax = vectors[0][0], bx = vectors[1][0], by = vectors[1][1];
  const double cx = vectors[2][0], cy = vectors[2][1], cz = vectors[2][2];
  // widths perpendicular to the faces: volume / |b x c|, volume / |c x a|, volume / |a x b|
  const double volume = ax * by * cz;
  const double cross_z = bx * cy - by * cx;
  const double width_a = clusters.width_a = volume / std::sqrt(by * cz * by * cz + bx * cz * bx * cz + cross_z * cross_z);
  const double width_b = clusters.width_b = by * cz / std::hypot(cy, cz);
  // columns about as wide as a cluster of 8 atoms at the mean density
  const double side = std::cbrt(double(kClusterSize) * volume / double(std::max<int64_t>(n_atoms, 1)));
  const int64_t na = clusters.na = std::max<int64_t>(1, std::llround(width_a / side));
  const int64_t nb = clusters.nb = std::max<int64_t>(1, std::llround(width_b / side));
  // fractional coordinates in [0, 1), and the positions wrapped into the box by a lattice vector
  std::vector<std::array<double, 3>> fractional(n_atoms), wrapped(n_atoms), lattice_shift(n_atoms);
  std::vector<int64_t> column(n_atoms), column_starts(na * nb + 1, 0), order(n_atoms);
  for (int64_t a = 0; a < n_atoms; ++a) {
    const double x = double(positions[3 * a]) - lower[0], y = double(positions[3 * a + 1]) - lower[1];
    const double z = double(positions[3 * a + 2]) - lower[2];
    double sc = z / cz, sb = (y - sc * cy) / by, sa = (x - sc * cx - sb * bx) / ax;
    double image[3] = {0, 0, 0};
    if (periodic) {
      image[0] = std::floor(sa), image[1] = std::floor(sb), image[2] = std::floor(sc);
      sa -= image[0], sb -= image[1], sc -= image[2];
    }
    for (int d = 0; d < 3; ++d) {
      lattice_shift[a][d] = image[0] * vectors[0][d] + image[1] * vectors[1][d] + image[2] * vectors[2][d];
      wrapped[a][d] = double(positions[3 * a + d]) - lattice_shift[a][d];
    }
    fractional[a] = {sa, sb, sc};
    const int64_t ia = std::min(na - 1, std::max<int64_t>(0, int64_t(std::floor(sa * na))));
    const int64_t ib = std::min(nb - 1, std::max<int64_t>(0, int64_t(std::floor(sb * nb))));
    column[a] = ia * nb + ib;
    ++column_starts[column[a] + 1];
  }
  for (int64_t c = 0; c < na * nb; ++c) column_starts[c + 1] += column_starts[c];
  {
    std::vector<int64_t> next(column_starts.begin(), column_starts.end() - 1);
    for (int64_t a = 0; a < n_atoms; ++a) order[next[column[a]]++] = a;
  }
  // clusters: each column's atoms sorted along c, eight at a time
  std::vector<int64_t>& column_clusters = clusters.column_clusters;
  column_clusters.assign(na * nb + 1, 0);
  for (int64_t c = 0; c < na * nb; ++c) {
    std::sort(order.begin() + column_starts[c], order.begin() + column_starts[c + 1],
              [&](int64_t i, int64_t j) { return fractional[i][2] < fractional[j][2]; });
    const int64_t count = column_starts[c + 1] - column_starts[c];
    column_clusters[c + 1] = column_clusters[c] + (count + kClusterSize - 1) / kClusterSize;
  }
  const int64_t n_clusters = column_clusters[na * nb];
  const int64_t n_slots = kClusterSize * n_clusters;
  auto& slot_atoms = clusters.slot_atoms;
  auto& bounds = clusters.bounds;
  slot_atoms.assign(n_slots, -1);
  clusters.slot_shifts.assign(3 * n_slots, T(0));
  clusters.coordinates.assign(3 * n_slots, T(kFarAway));
  clusters.cluster_of.resize(n_atoms);
  clusters.slot_of.resize(n_atoms);
  clusters.cluster_column.resize(n_clusters);
  bounds.resize(n_clusters);
  for (int64_t c = 0; c < na * nb; ++c)
    for (int64_t k = column_starts[c]; k < column_starts[c + 1]; ++k) {
      const int64_t rank = k - column_starts[c], cluster = column_clusters[c] + rank / kClusterSize;
      const int64_t slot = kClusterSize * cluster + rank % kClusterSize, atom = order[k];
      slot_atoms[slot] = int32_t(atom);
      clusters.cluster_of[atom] = int32_t(cluster);
      clusters.slot_of[atom] = int32_t(rank % kClusterSize);
      clusters.cluster_column[cluster] = int32_t(c);
      for (int d = 0; d < 3; ++d) {
        clusters.slot_shifts[3 * slot + d] = T(-lattice_shift[atom][d]);
        clusters.coordinates[3 * kClusterSize * cluster + kClusterSize * d + rank % kClusterSize] =
            T(wrapped[atom][d]);
      }
    }
  for (int64_t cluster = 0; cluster < n_clusters; ++cluster) {
    std::array<double, 6> bound = {1e300, 1e300, 1e300, -1e300, -1e300, -1e300};
    for (int64_t s = 0; s < kClusterSize; ++s) {
      const int64_t slot = kClusterSize * cluster + s;
      if (slot_atoms[slot] < 0) continue;
      for (int d = 0; d < 3; ++d) {
        bound[d] = std::min(bound[d], wrapped[slot_atoms[slot]][d]);
        bound[3 + d] = std::max(bound[3 + d], wrapped[slot_atoms[slot]][d]);
      }
    }
    bounds[cluster] = bound;
  }
  clusters.filled_rows.assign(n_clusters, 0);
  clusters.filled_columns.assign(n_clusters, 0);
  for (int64_t cluster = 0; cluster < n_clusters; ++cluster)
    for (int64_t s = 0; s < kClusterSize; ++s)
      if (slot_atoms[kClusterSize * cluster + s] >= 0) {
        clusters.filled_rows[cluster] |= uint64_t(0xFF) << (kClusterSize * s);
        clusters.filled_columns[cluster] |= uint64_t(1) << s;
      }
  return clusters;
}

// The excluded partners of each atom, both ways (the table given holds each pair once, from its lower atom):
// those of atom a are excluded[excluded_starts[a]:excluded_starts[a + 1]]
inline void exclusions_both_ways(int64_t n_atoms, const int64_t* exclusion_starts, const int64_t* exclusion_partners,
                                 std::vector<int64_t>& excluded_starts, std::vector<int64_t>& excluded) {
  excluded_starts.assign(n_atoms + 1, 0);
  excluded.resize(2 * exclusion_starts[n_atoms]);
  for (int64_t a = 0; a < n_atoms; ++a) {
    excluded_starts[a + 1] += exclusion_starts[a + 1] - exclusion_starts[a];
    for (int64_t e = exclusion_starts[a]; e < exclusion_starts[a + 1]; ++e)
      ++excluded_starts[exclusion_partners[e] + 1];
  }
  for (int64_t a = 0; a < n_atoms; ++a) excluded_starts[a + 1] += excluded_starts[a];
  {
    std::vector<int64_t> next(excluded_starts.begin(), excluded_starts.end() - 1);
    for (int64_t a = 0; a < n_atoms; ++a)
      for (int64_t e = exclusion_starts[a]; e < exclusion_starts[a + 1]; ++e) {
        const int64_t b = exclusion_partners[e];
        excluded[next[a]++] = b;
        excluded[next[b]++] = a;
      }
  }
}

// The cluster pairs (see the top of the file): the partners of cluster c are pair_clusters[pair_starts[c]:
// pair_starts[c + 1]], each seen through the lattice vector pair_shifts[p], with the mask pair_masks[p]
template <typename T>
void search_cluster_pairs(const Clusters<T>& clusters, int64_t n_atoms, double list_cutoff,
                          const int64_t* exclusion_starts, const int64_t* exclusion_partners,
                          std::vector<int64_t>& pair_starts, std::vector<int32_t>& pair_clusters,
                          std::vector<T>& pair_shifts, std::vector<int64_t>& pair_masks) {
  using Row = typename RowOf<T>::type;
  const bool periodic = clusters.periodic;
  const auto& vectors = clusters.vectors;
  const int64_t na = clusters.na, nb = clusters.nb, n_clusters = int64_t(clusters.bounds.size());
  const auto& bounds = clusters.bounds;
  const auto& column_clusters = clusters.column_clusters;
  const auto& slot_atoms = clusters.slot_atoms;
  const auto& cluster_of = clusters.cluster_of;
  const auto& slot_of = clusters.slot_of;
  const T* coordinates = clusters.coordinates.data();
  std::vector<int64_t> excluded_starts, excluded;
  exclusions_both_ways(n_atoms, exclusion_starts, exclusion_partners, excluded_starts, excluded);
  // a pair of atoms within the list cutoff lies within reach columns along a and b (|delta s| < cutoff / width)
  const int64_t reach_a = int64_t(std::ceil(list_cutoff * na / clusters.width_a));
  const int64_t reach_b = int64_t(std::ceil(list_cutoff * nb / clusters.width_b));
  const double cutoff2 = list_cutoff * list_cutoff;
  // chunks of consecutive clusters, a few per thread, each with its own list (joined in order at the end)
  const int64_t n_chunks = std::max<int64_t>(1, std::min<int64_t>(n_clusters, 8 * at::get_num_threads()));
  std::vector<FoundClusterPairs> found(n_chunks);
  // the partners of one cluster, appended to `mine`
  auto list_partners = [&](int64_t cluster, FoundClusterPairs& mine) {
    const std::array<double, 6>& bound = bounds[cluster];
    const int64_t ia = clusters.cluster_column[cluster] / nb, ib = clusters.cluster_column[cluster] % nb;
    // the images along c whose z range [n c_z, (n + 1) c_z) comes within the list cutoff of this cluster
    const int64_t image_c_low = periodic ? int64_t(std::floor((bound[2] - list_cutoff) / vectors[2][2])) : 0;
    const int64_t image_c_high = periodic ? int64_t(std::floor((bound[5] + list_cutoff) / vectors[2][2])) : 0;
    int64_t listed = 0;
    for (int64_t oa = -reach_a; oa <= reach_a; ++oa) {
      const int64_t image_a = floor_divide(ia + oa, na);
      if (!periodic && image_a != 0) continue;
      for (int64_t ob = -reach_b; ob <= reach_b; ++ob) {
        const int64_t image_b = floor_divide(ib + ob, nb);
        if (!periodic && image_b != 0) continue;
        const int64_t neighbour = (ia + oa - image_a * na) * nb + (ib + ob - image_b * nb);
        const int64_t first = column_clusters[neighbour], last = column_clusters[neighbour + 1];
        for (int64_t image_c = image_c_low; image_c <= image_c_high; ++image_c) {
          const std::array<int64_t, 3> image = {image_a, image_b, image_c};
          double shift[3];
          for (int d = 0; d < 3; ++d)
            shift[d] = image_a * vectors[0][d] + image_b * vectors[1][d] + image_c * vectors[2][d];
          // the column's clusters are sorted along z: those overlapping [low z - cutoff, high z + cutoff]
          const double z_low = bound[2] - list_cutoff - shift[2], z_high = bound[5] + list_cutoff - shift[2];
          int64_t j = std::partition_point(bounds.begin() + first, bounds.begin() + last,
                                           [&](const std::array<double, 6>& b) { return b[5] < z_low; }) -
                      bounds.begin();
          for (; j < last && bounds[j][2] <= z_high; ++j) {
            if (j < cluster) continue;  // listed from the partner
            const bool self = j == cluster;
            if (self && image < std::array<int64_t, 3>{0, 0, 0}) continue;  // the opposite shift lists it
            double gap2 = 0.0;
            for (int d = 0; d < 3; ++d) {
              const double gap =
                  std::max({0.0, bounds[j][d] + shift[d] - bound[3 + d], bound[d] - bounds[j][3 + d] - shift[d]});
              gap2 += gap * gap;
            }
            if (gap2 >= cutoff2) continue;
            // the pairs within the list cutoff, a row of 8 partners at a time
            const Row xj = load_row(coordinates + 3 * kClusterSize * j) + T(shift[0]);
            const Row yj = load_row(coordinates + 3 * kClusterSize * j + kClusterSize) + T(shift[1]);
            const Row zj = load_row(coordinates + 3 * kClusterSize * j + 2 * kClusterSize) + T(shift[2]);
            const T* xi = coordinates + 3 * kClusterSize * cluster;
            uint64_t mask = 0;
            for (int64_t a = 0; a < kClusterSize; ++a) {
              const Row dx = xj - xi[a], dy = yj - xi[kClusterSize + a], dz = zj - xi[2 * kClusterSize + a];
              mask |= lane_bits(dx * dx + dy * dy + dz * dz < T(cutoff2)) << (kClusterSize * a);
            }
            mask &= clusters.filled_rows[cluster] & clusters.filled_columns[j] * 0x0101010101010101ull;
            if (self) mask &= image == std::array<int64_t, 3>{0, 0, 0} ? kAbove : ~kDiagonal;
            for (int64_t a = 0; a < kClusterSize && mask != 0; ++a) {
              const int64_t atom = slot_atoms[kClusterSize * cluster + a];
              if (atom < 0) break;
              for (int64_t e = excluded_starts[atom]; e < excluded_starts[atom + 1]; ++e)
                if (cluster_of[excluded[e]] == j)
                  mask &= ~(uint64_t(1) << (kClusterSize * a + slot_of[excluded[e]]));
            }
            if (mask == 0) continue;
            mine.partners.push_back(int32_t(j));
            mine.shifts.push_back({shift[0], shift[1], shift[2]});
            mine.masks.push_back(mask);
            ++listed;
          }
        }
      }
    }
    mine.counts.push_back(listed);
  };
  at::parallel_for(0, n_chunks, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
    for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk)
      for (int64_t cluster = n_clusters * chunk / n_chunks; cluster < n_clusters * (chunk + 1) / n_chunks;
           ++cluster)
        list_partners(cluster, found[chunk]);
  });
  pair_starts.assign(n_clusters + 1, 0);
  int64_t total = 0;
  for (const auto& mine : found) total += int64_t(mine.partners.size());
  pair_clusters.resize(total);
  pair_shifts.resize(3 * total);
  pair_masks.resize(total);
  int64_t filled = 0, cluster = 0;
  for (const auto& mine : found) {
    for (const int64_t count : mine.counts) pair_starts[++cluster] = count;
    for (size_t p = 0; p < mine.partners.size(); ++p, ++filled) {
      pair_clusters[filled] = mine.partners[p];
      for (int d = 0; d < 3; ++d) pair_shifts[3 * filled + d] = T(mine.shifts[p][d]);
      pair_masks[filled] = int64_t(mine.masks[p]);
    }
  }
  for (int64_t c = 0; c < n_clusters; ++c) pair_starts[c + 1] += pair_starts[c];
}

}  // namespace

// (slot_atoms (8 C,) int32 (-1: empty slot), slot_shifts (8 C, 3) the lattice vectors that wrapped them into the box,
//  pair_starts (C + 1,) int64, pair_clusters (P,) int32, pair_shifts (P, 3), pair_masks (P,) int64)
std::vector<at::Tensor> cluster_pairs(at::Tensor positions, at::Tensor box, double list_cutoff,
                                         at::Tensor exclusion_starts, at::Tensor exclusion_partners) {
  positions = positions.contiguous();
  const int64_t n_atoms = positions.size(0);
  const bool periodic = box.numel() > 0;
  if (periodic) box = box.to(positions.scalar_type()).contiguous();
  TORCH_CHECK(exclusion_starts.numel() == n_atoms + 1, "cluster_pairs: exclusion_starts must have N + 1 entries");
  exclusion_starts = exclusion_starts.contiguous();
  exclusion_partners = exclusion_partners.contiguous();
  std::vector<at::Tensor> result;
  AT_DISPATCH_FLOATING_TYPES(positions.scalar_type(), "cluster_pairs", [&] {
    Clusters<scalar_t> clusters = make_clusters<scalar_t>(
        positions.data_ptr<scalar_t>(), periodic ? box.data_ptr<scalar_t>() : nullptr, n_atoms, list_cutoff);
    std::vector<int32_t> pair_clusters;
    std::vector<scalar_t> pair_shifts;
    std::vector<int64_t> pair_starts, pair_masks;
    search_cluster_pairs<scalar_t>(clusters, n_atoms, list_cutoff, exclusion_starts.data_ptr<int64_t>(),
                                   exclusion_partners.data_ptr<int64_t>(), pair_starts, pair_clusters, pair_shifts,
                                   pair_masks);
    auto& slot_atoms = clusters.slot_atoms;
    auto& slot_shifts = clusters.slot_shifts;
    const int64_t n_slots = int64_t(slot_atoms.size()), n_pairs = int64_t(pair_clusters.size());
    auto to_tensor = [](auto& values, std::vector<int64_t> shape, at::ScalarType dtype) {
      return at::from_blob(values.data(), shape, dtype).clone();
    };
    result = {to_tensor(slot_atoms, {n_slots}, at::kInt),
              to_tensor(slot_shifts, {n_slots, 3}, positions.scalar_type()),
              to_tensor(pair_starts, {int64_t(pair_starts.size())}, at::kLong),
              to_tensor(pair_clusters, {n_pairs}, at::kInt),
              to_tensor(pair_shifts, {n_pairs, 3}, positions.scalar_type()),
              to_tensor(pair_masks, {n_pairs}, at::kLong)};
  });
  return result;
}

}  // namespace mindsponge_kernels
