// Pair energies given by an expression of the distance r (OpenMM's CustomBondForce and CustomNonbondedForce,
// mindsponge.forcefield.custom): the expression arrives lowered to a straight-line program over registers of
// dual numbers, value and d/dr (mindsponge.forcefield.expressions.program), run here on blocks of pairs so that
// each instruction is one short loop. Computed in double whatever the type of the positions.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "kernels.h"

namespace mindsponge_kernels {

namespace {

// the opcodes of mindsponge.forcefield.expressions.program.OPCODES
enum Op : int64_t {
  kOpConst, kOpVariable, kOpInput, kOpAdd, kOpMul, kOpPowi, kOpPowc, kOpPow, kOpSelect, kOpMin, kOpMax, kOpAtan2, kOpSqrt, kOpExp, kOpLog, kOpSin,
  kOpCos, kOpTan, kOpAsin, kOpAcos, kOpAtan, kOpSinh, kOpCosh, kOpTanh, kOpErf, kOpErfc, kOpAbs, kOpFloor, kOpCeil, kOpStep, kOpDelta, kOpRecip
};
constexpr int64_t kBlock = 32;  // pairs per pass of the program
constexpr double kSqrtPi = 1.7724538509055159;

// how many of an instruction's operands (a, b, c) are registers
int register_operands(int64_t op) {
  switch (op) {
    case kOpConst: case kOpVariable: case kOpInput: return 0;
    case kOpSelect: return 3;
    case kOpAdd: case kOpMul: case kOpPow: case kOpMin: case kOpMax: case kOpAtan2: return 2;
    default: return 1;
  }
}

}  // namespace

ExpressionPairTerm::ExpressionPairTerm(ExpressionPairSpec spec) : spec_(std::move(spec)) {
  spec_.code = spec_.code.to(at::kLong).contiguous();
  spec_.values = spec_.values.to(at::kDouble).contiguous();
  spec_.first = spec_.first.to(at::kLong).contiguous();
  spec_.second = spec_.second.to(at::kLong).contiguous();
  spec_.pair_table = spec_.pair_table.to(at::kDouble).contiguous();
  spec_.particle_table = spec_.particle_table.to(at::kDouble).contiguous();
  if (spec_.weights.defined()) spec_.weights = spec_.weights.to(at::kDouble).contiguous();
  TORCH_CHECK(spec_.code.dim() == 2 && spec_.code.size(1) == 5, "ExpressionPairTerm: code must be (I, 5)");
  TORCH_CHECK(spec_.result >= 0 && spec_.result < spec_.registers, "ExpressionPairTerm: bad result register");
  // which registers depend on r: the others carry no derivative (and no 0 * inf from a derivative of a
  // constant part, sqrt(eps1 * eps2) at eps = 0)
  const int64_t* code = spec_.code.data_ptr<int64_t>();
  std::vector<bool> dynamic_register(spec_.registers, false);
  dynamic_.resize(spec_.code.size(0));
  for (int64_t i = 0; i < spec_.code.size(0); ++i) {
    const int64_t* row = code + 5 * i;
    TORCH_CHECK(row[1] >= 0 && row[1] < spec_.registers, "ExpressionPairTerm: bad destination register");
    TORCH_CHECK(row[0] >= kOpConst && row[0] <= kOpRecip, "ExpressionPairTerm: unknown opcode ", row[0]);
    bool dynamic = row[0] == kOpVariable;
    for (int k = 0; k < register_operands(row[0]); ++k) {
      TORCH_CHECK(row[2 + k] >= 0 && row[2 + k] < spec_.registers, "ExpressionPairTerm: bad operand");
      dynamic = dynamic || dynamic_register[row[2 + k]];
    }
    dynamic_register[row[1]] = dynamic;
    dynamic_[i] = dynamic;
  }
  const int64_t n_pairs = spec_.first.size(0);
  if (spec_.cutoff <= 0.0) {  // every pair, always
    listed_.resize(n_pairs);
    for (int64_t p = 0; p < n_pairs; ++p) listed_[p] = p;
  }
}

void ExpressionPairTerm::image(const double* box, double* d) const {
  // the minimum image of mindsponge.space.minimum_image (reduced triclinic boxes, rows are box vectors)
  for (int axis = 2; axis >= 0; --axis) {
    const double shift = std::nearbyint(d[axis] / box[4 * axis]);
    for (int a = 0; a < 3; ++a) d[a] -= shift * box[3 * axis + a];
  }
}

template <typename T>
void ExpressionPairTerm::build(const T* x, const double* box, int64_t n_atoms) {
  const int64_t* first = spec_.first.data_ptr<int64_t>();
  const int64_t* second = spec_.second.data_ptr<int64_t>();
  const double reach = (spec_.cutoff + spec_.skin) * (spec_.cutoff + spec_.skin);
  listed_.clear();
  for (int64_t p = 0; p < spec_.first.size(0); ++p) {
    double d[3];
    for (int a = 0; a < 3; ++a) d[a] = double(x[3 * second[p] + a]) - double(x[3 * first[p] + a]);
    if (box) image(box, d);
    if (d[0] * d[0] + d[1] * d[1] + d[2] * d[2] <= reach) listed_.push_back(p);
  }
  reference_.assign(x, x + 3 * n_atoms);
  builds_ += 1;
}

template <typename T>
bool ExpressionPairTerm::moved(const T* x, int64_t n_atoms) const {
  // a rebuild once any atom has moved half the skin since the last one (mindsponge.neighbors.NeighborList)
  if (int64_t(reference_.size()) != 3 * n_atoms) return true;
  const double limit = 0.25 * spec_.skin * spec_.skin;
  for (int64_t k = 0; k < n_atoms; ++k) {
    double squared = 0.0;
    for (int a = 0; a < 3; ++a) {
      const double step = double(x[3 * k + a]) - reference_[3 * k + a];
      squared += step * step;
    }
    if (squared > limit) return true;
  }
  return false;
}

void ExpressionPairTerm::run(const int64_t* pairs, int64_t count, const double* distance, double* energy,
                             double* derivative) {
  const int64_t* code = spec_.code.data_ptr<int64_t>();
  const double* values = spec_.values.data_ptr<double>();
  const int64_t* first = spec_.first.data_ptr<int64_t>();
  const int64_t* second = spec_.second.data_ptr<int64_t>();
  const double* pair_table = spec_.pair_table.data_ptr<double>();
  const double* particle_table = spec_.particle_table.data_ptr<double>();
  const int64_t pair_columns = spec_.pair_table.size(1), particle_columns = spec_.particle_table.size(1);
  double* v = value_.data();
  double* g = gradient_.data();
  for (int64_t i = 0; i < spec_.code.size(0); ++i) {
    const int64_t* row = code + 5 * i;
    double* out = v + kBlock * row[1];
    double* out_g = g + kBlock * row[1];
    const double* a = v + kBlock * row[2];
    const double* ag = g + kBlock * row[2];
    const double* b = v + kBlock * row[3];
    const double* bg = g + kBlock * row[3];
    const double c = values[i];
    switch (row[0]) {
      case kOpConst:
        for (int64_t k = 0; k < count; ++k) out[k] = c, out_g[k] = 0.0;
        break;
      case kOpVariable:
        for (int64_t k = 0; k < count; ++k) out[k] = distance[k], out_g[k] = 1.0;
        break;
      case kOpInput: {
        const int64_t source = row[2], column = row[3];
        for (int64_t k = 0; k < count; ++k) {
          const int64_t p = pairs[k];
          out[k] = source == 0 ? pair_table[p * pair_columns + column]
                               : particle_table[(source == 1 ? first[p] : second[p]) * particle_columns + column];
          out_g[k] = 0.0;
        }
        break;
      }
      case kOpAdd:
        for (int64_t k = 0; k < count; ++k) out[k] = a[k] + b[k], out_g[k] = ag[k] + bg[k];
        break;
      case kOpMul:
        for (int64_t k = 0; k < count; ++k) out_g[k] = ag[k] * b[k] + a[k] * bg[k], out[k] = a[k] * b[k];
        break;
      case kOpPowi: {
        const int n = int(c);
        for (int64_t k = 0; k < count; ++k) {
          const double lower = n == 0 ? 0.0 : std::pow(a[k], n - 1);
          out_g[k] = n * lower * ag[k];
          out[k] = n == 0 ? 1.0 : lower * a[k];
        }
        break;
      }
      case kOpPowc:
        for (int64_t k = 0; k < count; ++k) {
          const double lower = std::pow(a[k], c - 1.0);
          out_g[k] = c * lower * ag[k];
          out[k] = lower * a[k];
        }
        break;
      case kOpPow:
        for (int64_t k = 0; k < count; ++k) {
          const double value = std::pow(a[k], b[k]);
          const double from_base = ag[k] == 0.0 ? 0.0 : b[k] * std::pow(a[k], b[k] - 1.0) * ag[k];
          const double from_exponent = bg[k] == 0.0 ? 0.0 : value * std::log(a[k]) * bg[k];
          out_g[k] = from_base + from_exponent;
          out[k] = value;
        }
        break;
      case kOpSelect: {
        const double* z = v + kBlock * row[4];
        const double* zg = g + kBlock * row[4];
        for (int64_t k = 0; k < count; ++k) {
          const bool take = a[k] != 0.0;
          out_g[k] = take ? bg[k] : zg[k];
          out[k] = take ? b[k] : z[k];
        }
        break;
      }
      case kOpMin:
      case kOpMax:
        for (int64_t k = 0; k < count; ++k) {
          const bool take_a = row[0] == kOpMin ? a[k] <= b[k] : a[k] >= b[k];
          out_g[k] = take_a ? ag[k] : bg[k];
          out[k] = take_a ? a[k] : b[k];
        }
        break;
      case kOpAtan2:
        for (int64_t k = 0; k < count; ++k) {
          out_g[k] = (b[k] * ag[k] - a[k] * bg[k]) / (a[k] * a[k] + b[k] * b[k]);
          out[k] = std::atan2(a[k], b[k]);
        }
        break;
      default:  // functions of one argument
        for (int64_t k = 0; k < count; ++k) {
          const double x = a[k];
          double value = 0.0, slope = 0.0;
          switch (row[0]) {
            case kOpSqrt: value = std::sqrt(x), slope = 0.5 / value; break;
            case kOpExp: value = std::exp(x), slope = value; break;
            case kOpLog: value = std::log(x), slope = 1.0 / x; break;
            case kOpSin: value = std::sin(x), slope = std::cos(x); break;
            case kOpCos: value = std::cos(x), slope = -std::sin(x); break;
            case kOpTan: value = std::tan(x), slope = 1.0 + value * value; break;
            case kOpAsin: value = std::asin(x), slope = 1.0 / std::sqrt(1.0 - x * x); break;
            case kOpAcos: value = std::acos(x), slope = -1.0 / std::sqrt(1.0 - x * x); break;
            case kOpAtan: value = std::atan(x), slope = 1.0 / (1.0 + x * x); break;
            case kOpSinh: value = std::sinh(x), slope = std::cosh(x); break;
            case kOpCosh: value = std::cosh(x), slope = std::sinh(x); break;
            case kOpTanh: value = std::tanh(x), slope = 1.0 - value * value; break;
            case kOpErf: value = std::erf(x), slope = 2.0 / kSqrtPi * std::exp(-x * x); break;
            case kOpErfc: value = std::erfc(x), slope = -2.0 / kSqrtPi * std::exp(-x * x); break;
            case kOpAbs: value = std::abs(x), slope = x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); break;
            case kOpFloor: value = std::floor(x); break;
            case kOpCeil: value = std::ceil(x); break;
            case kOpStep: value = x >= 0 ? 1.0 : 0.0; break;
            case kOpDelta: value = x == 0 ? 1.0 : 0.0; break;
            case kOpRecip: value = 1.0 / x, slope = -value * value; break;
            default: TORCH_CHECK(false, "ExpressionPairTerm: unknown opcode ", row[0]);
          }
          out_g[k] = slope * ag[k];
          out[k] = value;
        }
    }
    if (!dynamic_[i]) std::fill(out_g, out_g + count, 0.0);
  }
  for (int64_t k = 0; k < count; ++k) {
    energy[k] = v[kBlock * spec_.result + k];
    derivative[k] = g[kBlock * spec_.result + k];
  }
}

double ExpressionPairTerm::add_forces(const at::Tensor& positions, const at::Tensor& box, at::Tensor& forces) {
  const int64_t n_atoms = positions.size(0);
  const bool periodic = spec_.periodic && box.defined();
  double box_values[9];
  if (periodic) {
    auto b = box.to(at::kDouble).contiguous();
    std::copy(b.data_ptr<double>(), b.data_ptr<double>() + 9, box_values);
  }
  const double* b = periodic ? box_values : nullptr;
  value_.resize(kBlock * spec_.registers);
  gradient_.resize(kBlock * spec_.registers);
  double total = 0.0;
  AT_DISPATCH_FLOATING_TYPES(positions.scalar_type(), "expression_pair_term", [&] {
    const scalar_t* x = positions.data_ptr<scalar_t>();
    scalar_t* f = forces.data_ptr<scalar_t>();
    if (spec_.cutoff > 0.0 && moved(x, n_atoms)) build(x, b, n_atoms);
    const int64_t* first = spec_.first.data_ptr<int64_t>();
    const int64_t* second = spec_.second.data_ptr<int64_t>();
    const double* weights = spec_.weights.defined() ? spec_.weights.data_ptr<double>() : nullptr;
    const double cutoff = spec_.cutoff, start = spec_.switch_distance;
    int64_t pairs[kBlock];
    double offsets[3 * kBlock], distance[kBlock], energy[kBlock], derivative[kBlock];
    const int64_t n_listed = int64_t(listed_.size());
    for (int64_t begin = 0; begin < n_listed;) {
      int64_t count = 0;  // the next pairs within the cutoff
      for (; begin < n_listed && count < kBlock; ++begin) {
        const int64_t p = listed_[begin];
        double* d = offsets + 3 * count;
        for (int a = 0; a < 3; ++a) d[a] = double(x[3 * second[p] + a]) - double(x[3 * first[p] + a]);
        if (b) image(b, d);
        const double r = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
        if (cutoff > 0.0 && !(r < cutoff)) continue;
        pairs[count] = p, distance[count] = r;
        ++count;
      }
      if (count == 0) continue;
      run(pairs, count, distance, energy, derivative);
      for (int64_t k = 0; k < count; ++k) {
        double e = energy[k], de = derivative[k];
        if (start >= 0.0) {  // OpenMM's switching function 1 - 10 s^3 + 15 s^4 - 6 s^5
          const double width = cutoff - start, s = std::max(0.0, (distance[k] - start) / width);
          const double switched = 1.0 + s * s * s * (-10.0 + s * (15.0 - 6.0 * s));
          de = de * switched + e * (s * s * (-30.0 + s * (60.0 - 30.0 * s)) / width);
          e *= switched;
        }
        if (weights) e *= weights[pairs[k]], de *= weights[pairs[k]];
        total += e;
        const double scale = de / distance[k];
        const int64_t i = first[pairs[k]], j = second[pairs[k]];
        for (int a = 0; a < 3; ++a) {
          const double push = scale * offsets[3 * k + a];
          f[3 * i + a] += scalar_t(push);
          f[3 * j + a] -= scalar_t(push);
        }
      }
    }
  });
  if (periodic && spec_.long_range != 0.0) total += spec_.long_range / (box_values[0] * box_values[4] * box_values[8]);
  return total;
}

}  // namespace mindsponge_kernels
