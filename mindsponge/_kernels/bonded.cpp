// Compiled CPU kernels of the bonded terms, see mindsponge/forcefield/bonded.py for the energies.
//
// bond_forces    : E = 1/2 k (r - r0)^2                       (HarmonicBond, UreyBradley)
// angle_forces   : E = 1/2 k (theta - theta0)^2               (HarmonicAngle)
// torsion_forces : E = k (1 + cos(n phi - phase))             (PeriodicTorsion)
// improper_forces: E = k (phi - phi0)^2, optionally on a circle (HarmonicImproper)
//
// Each returns (energy, forces): the energy summed in double precision as a 0-dim tensor and the
// forces -dE/dx as an (N, 3) tensor, both in the dtype of the positions. Angles and dihedrals are
// those of the torch code (atan2 forms, IUPAC sign); the dihedral gradient is Blondel & Karplus's
// (J. Comput. Chem. 17, 1132 (1996)), which needs no inverse trigonometric function. One serial pass
// per term: a few thousand interactions cost microseconds, and the scatter into the forces needs no
// atomics. Parameters are read in double precision whatever the dtype of the positions.
#include <ATen/ATen.h>

#include "kernels.h"

#include <cmath>

namespace {

template <typename T>
inline void difference(const T* positions, int64_t from, int64_t to, double* out) {
  for (int d = 0; d < 3; ++d) out[d] = double(positions[3 * to + d]) - double(positions[3 * from + d]);
}

inline void cross(const double* a, const double* b, double* out) {
  out[0] = a[1] * b[2] - a[2] * b[1];
  out[1] = a[2] * b[0] - a[0] * b[2];
  out[2] = a[0] * b[1] - a[1] * b[0];
}

inline double dot(const double* a, const double* b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }

template <typename T>
inline void add_force(T* forces, int64_t atom, const double* force, double scale) {
  for (int d = 0; d < 3; ++d) forces[3 * atom + d] += T(scale * force[d]);
}

// One pass of a term over its interactions, adding -dE/dx into f and returning the energy (double).
template <typename T>
double bond_pass(const T* x, T* f, const int64_t* index, int64_t count, const double* r0, const double* kk) {
  double energy = 0.0;
  for (int64_t m = 0; m < count; ++m) {
    const int64_t a = index[2 * m], b = index[2 * m + 1];
    double bond[3];
    difference(x, a, b, bond);
    const double r = std::sqrt(dot(bond, bond));
    const double stretch = r - r0[m];
    energy += 0.5 * kk[m] * stretch * stretch;
    if (r > 0.0) {
      const double scale = kk[m] * stretch / r;  // dE/dr / r; the force on b is -scale * bond
      add_force(f, a, bond, scale);
      add_force(f, b, bond, -scale);
    }
  }
  return energy;
}

template <typename T>
double angle_pass(const T* x, T* f, const int64_t* index, int64_t count, const double* theta0,
                  const double* kk) {
  double energy = 0.0;
  for (int64_t m = 0; m < count; ++m) {
    const int64_t a = index[3 * m], b = index[3 * m + 1], c = index[3 * m + 2];
    double u[3], v[3], normal[3];
    difference(x, b, a, u);
    difference(x, b, c, v);
    cross(u, v, normal);
    double normal_length = std::sqrt(dot(normal, normal));
    const double theta = std::atan2(normal_length, dot(u, v));
    const double deviation = theta - theta0[m];
    energy += 0.5 * kk[m] * deviation * deviation;
    const double uu = dot(u, u), vv = dot(v, v);
    if (uu == 0.0 || vv == 0.0) continue;
    if (normal_length < 1e-6 * std::sqrt(uu * vv)) {  // collinear: any plane through u (as OpenMM)
      const double axis[3] = {std::abs(u[0]) < std::abs(u[1]) ? 1.0 : 0.0,
                              std::abs(u[0]) < std::abs(u[1]) ? 0.0 : 1.0, 0.0};
      cross(u, axis, normal);
      normal_length = std::sqrt(dot(normal, normal));
    }
    // dtheta/dx_a = (u x normal) / (|u|^2 |normal|); dtheta/dx_c = (normal x v) / (|v|^2 |normal|)
    double grad_a[3], grad_c[3];
    cross(u, normal, grad_a);
    cross(normal, v, grad_c);
    const double de_dtheta = kk[m] * deviation;
    const double scale_a = -de_dtheta / (uu * normal_length);
    const double scale_c = -de_dtheta / (vv * normal_length);
    add_force(f, a, grad_a, scale_a);
    add_force(f, c, grad_c, scale_c);
    add_force(f, b, grad_a, -scale_a);
    add_force(f, b, grad_c, -scale_c);
  }
  return energy;
}

// Dihedral of atoms (a, b, c, d) and its gradient; calls term(m, phi) -> dE/dphi and scatters the forces.
template <typename T, typename Term>
double dihedral_pass(const T* x, T* f, const int64_t* index, int64_t count, Term term) {
  double energy = 0.0;
  for (int64_t m = 0; m < count; ++m) {
    const int64_t a = index[4 * m], b = index[4 * m + 1], c = index[4 * m + 2], d = index[4 * m + 3];
    double b1[3], b2[3], b3[3], normal1[3], normal2[3];
    difference(x, a, b, b1);
    difference(x, b, c, b2);
    difference(x, c, d, b3);
    cross(b1, b2, normal1);
    cross(b2, b3, normal2);
    const double b2_length = std::sqrt(dot(b2, b2));
    const double phi = std::atan2(b2_length * dot(b1, normal2), dot(normal1, normal2));
    double de_dphi = 0.0;
    energy += term(m, phi, de_dphi);
    const double n1 = dot(normal1, normal1), n2 = dot(normal2, normal2);
    if (n1 == 0.0 || n2 == 0.0 || b2_length == 0.0) continue;  // collinear: phi undefined, no force
    // dphi/dx_a = -|b2| normal1 / |normal1|^2, dphi/dx_d = |b2| normal2 / |normal2|^2
    const double scale_a = de_dphi * b2_length / n1;   // force on a = -dE/dphi dphi/dx_a
    const double scale_d = -de_dphi * b2_length / n2;  // force on d
    double force_a[3], force_d[3];
    for (int k = 0; k < 3; ++k) {
      force_a[k] = scale_a * normal1[k];
      force_d[k] = scale_d * normal2[k];
    }
    const double p = dot(b1, b2) / (b2_length * b2_length), q = dot(b3, b2) / (b2_length * b2_length);
    for (int k = 0; k < 3; ++k) {
      const double shift = p * force_a[k] - q * force_d[k];  // keeps the torque zero
      f[3 * a + k] += T(force_a[k]);
      f[3 * b + k] += T(-force_a[k] - shift);
      f[3 * c + k] += T(-force_d[k] + shift);
      f[3 * d + k] += T(force_d[k]);
    }
  }
  return energy;
}

template <typename T>
double torsion_pass(const T* x, T* f, const int64_t* index, int64_t count, const double* n,
                    const double* shift, const double* kk) {
  return dihedral_pass(x, f, index, count, [&](int64_t m, double phi, double& de_dphi) {
    const double argument = n[m] * phi - shift[m];
    de_dphi = -kk[m] * n[m] * std::sin(argument);
    return kk[m] * (1.0 + std::cos(argument));
  });
}

// period <= 0: the plain difference phi - phi0; otherwise the shorter way round the circle
template <typename T>
double improper_pass(const T* x, T* f, const int64_t* index, int64_t count, const double* phi0,
                     const double* kk, double period) {
  return dihedral_pass(x, f, index, count, [&](int64_t m, double phi, double& de_dphi) {
    double deviation = phi - phi0[m], slope = 1.0;
    if (period > 0.0) {
      const double size = std::abs(deviation);
      slope = deviation < 0.0 ? -1.0 : 1.0;
      deviation = size;
      if (period - size < size) {
        deviation = period - size;
        slope = -slope;
      }
    }
    de_dphi = 2.0 * kk[m] * deviation * slope;
    return kk[m] * deviation * deviation;
  });
}

at::Tensor as_double(const at::Tensor& values) { return values.to(at::kDouble).contiguous(); }

}  // namespace

namespace mindsponge_kernels {

BondedTerm::BondedTerm(BondedKind kind, at::Tensor atoms, std::vector<at::Tensor> parameters, double period)
    : kind_(kind), atoms_(atoms.to(at::kLong).contiguous()), period_(period) {
  const size_t expected = kind == BondedKind::kTorsion ? 3 : 2;
  TORCH_CHECK(parameters.size() == expected, "BondedTerm: expected ", expected, " parameter tensors");
  for (auto& parameter : parameters) {
    parameters_.push_back(as_double(parameter));
    TORCH_CHECK(parameters_.back().numel() == atoms_.size(0), "BondedTerm: one parameter value per interaction");
  }
}

double BondedTerm::add_forces(const at::Tensor& positions, const at::Tensor& /*box*/, at::Tensor& forces) {
  const int64_t* index = atoms_.data_ptr<int64_t>();
  const int64_t count = atoms_.size(0);
  const double* p0 = parameters_[0].data_ptr<double>();
  const double* p1 = parameters_[1].data_ptr<double>();
  double energy = 0.0;
  AT_DISPATCH_FLOATING_TYPES(positions.scalar_type(), "bonded_forces", [&] {
    const scalar_t* x = positions.data_ptr<scalar_t>();
    scalar_t* f = forces.data_ptr<scalar_t>();
    switch (kind_) {
      case BondedKind::kBond: energy = bond_pass(x, f, index, count, p0, p1); break;
      case BondedKind::kAngle: energy = angle_pass(x, f, index, count, p0, p1); break;
      case BondedKind::kTorsion:
        energy = torsion_pass(x, f, index, count, p0, p1, parameters_[2].data_ptr<double>());
        break;
      case BondedKind::kImproper: energy = improper_pass(x, f, index, count, p0, p1, period_); break;
    }
  });
  return energy;
}

namespace {

std::tuple<at::Tensor, at::Tensor> evaluate(BondedKind kind, at::Tensor positions, at::Tensor atoms,
                                            std::vector<at::Tensor> parameters, double period = 0.0) {
  positions = positions.contiguous();
  auto forces = at::zeros_like(positions);
  const double energy = BondedTerm(kind, atoms, std::move(parameters), period).add_forces(positions, {}, forces);
  return {at::full({}, energy, positions.options()), forces};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> bond_forces(at::Tensor positions, at::Tensor atoms, at::Tensor length,
                                               at::Tensor k) {
  return evaluate(BondedKind::kBond, positions, atoms, {length, k});
}

std::tuple<at::Tensor, at::Tensor> angle_forces(at::Tensor positions, at::Tensor atoms, at::Tensor angle,
                                                at::Tensor k) {
  return evaluate(BondedKind::kAngle, positions, atoms, {angle, k});
}

std::tuple<at::Tensor, at::Tensor> torsion_forces(at::Tensor positions, at::Tensor atoms, at::Tensor periodicity,
                                                  at::Tensor phase, at::Tensor k) {
  return evaluate(BondedKind::kTorsion, positions, atoms, {periodicity, phase, k});
}

std::tuple<at::Tensor, at::Tensor> improper_forces(at::Tensor positions, at::Tensor atoms, at::Tensor angle,
                                                   at::Tensor k, double period) {
  return evaluate(BondedKind::kImproper, positions, atoms, {angle, k}, period);
}

}  // namespace mindsponge_kernels
