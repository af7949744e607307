// Definitions shared by mindsponge's compiled non-bonded kernels: the pair kernels (nonbonded.cpp,
// cluster_forces.cpp) and the cluster search (cluster_search.cpp).
#pragma once

#include <cstdint>

namespace mindsponge_kernels {

constexpr int64_t kPlain = 0, kReactionField = 1, kEwald = 2, kErf = 3;  // the kinds of Coulomb term
constexpr double kTwoOverSqrtPi = 1.1283791670955126;
constexpr double kCoulomb = 138.93545764438198;  // 1 / (4 pi eps0), kJ/mol nm / e^2 (common.units.COULOMB_MD)

struct PairOptions {
  double cutoff;           // <= 0: no cutoff
  double switch_distance;  // < 0: no switching
  int64_t kind;
  double alpha, krf, crf;
};

constexpr int64_t kClusterSize = 8;  // atoms per cluster of the cluster-pair list
constexpr double kFarAway = 1.0e4;   // where the empty slots of a cluster sit, nm (their pairs are masked out)

}  // namespace mindsponge_kernels
