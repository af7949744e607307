// Compiled CPU kernel of mindelec.fdtd's forward-only Yee update (see mindelec/_kernels/__init__.py).
//
// curl_update updates a group of field components (all H, or all E) in place, in one pass over the grid:
//
//   F_c = ca_c * F_c + cb_c * sum_t scale_t * D_t(S_t)
//
// D_t is the forward (H update) or backward (E update) difference of the source component S_t along
// axis_t, scale_t = sign_t / spacing_t, ca and cb are per-component scalars or per-cell tensors. Beyond
// the last node a difference takes the source from the other end (periodic axis) or as zero (PEC wall).
//
// Every tensor is a contiguous (n0, n1, n2) array (the caller puts the simulation's axes last, so that
// the innermost axis is long). The grid is walked row by row (rows along n2, parallelised with
// at::parallel_for, so the kernel follows torch.set_num_threads); each row's curl is summed term by term
// into a row buffer in L1, then the field row is updated once. Neighbouring rows of the sources are
// re-read from cache, so every field is read once and written once, and every source read about once,
// per group: 36 B per cell per component group in 3D float32, at the memory-bandwidth limit.
//
// cpml_update applies the CPML corrections of a group of components after curl_update, one slab (a
// component's field, one derivative axis, one side) after another, in place:
//
//   psi = b * psi + a * D(S),   F += sign * coefficient * (psi + kappa * D(S))   on the slab's cells
//
// D is the same difference as above (not divided by the spacing: a and kappa hold 1 / spacing), along
// the slab's axis; b, a, kappa are the profiles along that axis, one value per slab layer. Slabs of one
// field overlap in the corners, so they are applied one after another (rows of a slab in parallel).
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <optional>
#include <vector>

namespace {

template <typename T>
struct Term {
  const T* source;
  int64_t axis;
  T scale;
};

template <typename T>
struct Component {
  T* field;
  const T* ca;  // nullptr: the scalar ca_scalar
  T ca_scalar;
  const T* cb;  // nullptr: the scalar cb_scalar
  T cb_scalar;
  std::vector<Term<T>> terms;
};

// buffer[k] += scale * D(source)[k] along the row (axis 2), k = 0 .. n - 1
template <typename T>
inline void add_inner_difference(T* __restrict__ buffer, const T* __restrict__ here, T scale, int64_t n,
                                 bool forward, bool periodic) {
  if (forward) {
    for (int64_t k = 0; k < n - 1; ++k) buffer[k] += scale * (here[k + 1] - here[k]);
    buffer[n - 1] += scale * ((periodic ? here[0] : T(0)) - here[n - 1]);
  } else {
    buffer[0] += scale * (here[0] - (periodic ? here[n - 1] : T(0)));
    for (int64_t k = 1; k < n; ++k) buffer[k] += scale * (here[k] - here[k - 1]);
  }
}

// buffer[k] += scale * D(source)[k] across rows: the neighbouring row is `there` (nullptr: zero)
template <typename T>
inline void add_outer_difference(T* __restrict__ buffer, const T* __restrict__ here, const T* __restrict__ there,
                                 T scale, int64_t n, bool forward) {
  const T sign = forward ? T(-1) : T(1);
  if (there == nullptr) {
    for (int64_t k = 0; k < n; ++k) buffer[k] += (sign * scale) * here[k];
  } else if (forward) {
    for (int64_t k = 0; k < n; ++k) buffer[k] += scale * (there[k] - here[k]);
  } else {
    for (int64_t k = 0; k < n; ++k) buffer[k] += scale * (here[k] - there[k]);
  }
}

// field = ca * field + cb * curl along a row; ca, cb per cell or scalar
template <typename T, bool kCaTensor, bool kCbTensor>
inline void apply_row(T* __restrict__ field, const T* __restrict__ ca, T ca_scalar, const T* __restrict__ cb,
                      T cb_scalar, const T* __restrict__ curl, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    const T a = kCaTensor ? ca[k] : ca_scalar;
    const T b = kCbTensor ? cb[k] : cb_scalar;
    field[k] = a * field[k] + b * curl[k];
  }
}

template <typename T>
void curl_update_impl(std::vector<Component<T>>& components, const int64_t* shape, const bool* periodic,
                      bool forward) {
  const int64_t n0 = shape[0], n1 = shape[1], n2 = shape[2];
  const int64_t strides[2] = {n1 * n2, n2};
  const int64_t grain = std::max<int64_t>(1, 16384 / n2);
  at::parallel_for(0, n0 * n1, grain, [&](int64_t begin, int64_t end) {
    std::vector<T> curl(n2);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t index[2] = {row / n1, row % n1};
      const int64_t offset = row * n2;
      for (const Component<T>& component : components) {
        std::fill(curl.begin(), curl.end(), T(0));
        for (const Term<T>& term : component.terms) {
          const T* here = term.source + offset;
          if (term.axis == 2) {
            add_inner_difference(curl.data(), here, term.scale, n2, forward, periodic[2]);
            continue;
          }
          const int64_t count = term.axis == 0 ? n0 : n1;
          int64_t neighbour = index[term.axis] + (forward ? 1 : -1);
          const T* there = nullptr;
          if (neighbour < 0 || neighbour >= count) {
            if (periodic[term.axis]) neighbour = forward ? 0 : count - 1;
            else neighbour = -1;
          }
          if (neighbour >= 0) there = here + (neighbour - index[term.axis]) * strides[term.axis];
          add_outer_difference(curl.data(), here, there, term.scale, n2, forward);
        }
        T* field = component.field + offset;
        const T* ca = component.ca == nullptr ? nullptr : component.ca + offset;
        const T* cb = component.cb == nullptr ? nullptr : component.cb + offset;
        if (ca == nullptr && cb == nullptr) {
          apply_row<T, false, false>(field, ca, component.ca_scalar, cb, component.cb_scalar, curl.data(), n2);
        } else if (ca == nullptr) {
          apply_row<T, false, true>(field, ca, component.ca_scalar, cb, component.cb_scalar, curl.data(), n2);
        } else if (cb == nullptr) {
          apply_row<T, true, false>(field, ca, component.ca_scalar, cb, component.cb_scalar, curl.data(), n2);
        } else {
          apply_row<T, true, true>(field, ca, component.ca_scalar, cb, component.cb_scalar, curl.data(), n2);
        }
      }
    }
  });
}

template <typename T>
struct Slab {
  T* field;
  const T* source;
  T* psi;
  const T* b;
  const T* a;
  const T* kappa;
  const T* coefficient;  // nullptr: the scalar coefficient_scalar
  T coefficient_scalar;
  int64_t axis;
  int64_t start;  // first layer of the slab along axis, in the field
  int64_t thickness;
  T sign;
};

// part[k] = D(source) at the slab layers start .. start + n - 1 of a row along axis 2 (count nodes)
template <typename T>
inline void inner_slab_difference(T* __restrict__ part, const T* __restrict__ row, int64_t start, int64_t n,
                                  int64_t count, bool forward, bool periodic) {
  for (int64_t k = 0; k < n; ++k) {
    const int64_t g = start + k;
    if (forward) {
      const T there = g + 1 < count ? row[g + 1] : (periodic ? row[0] : T(0));
      part[k] = there - row[g];
    } else {
      const T there = g > 0 ? row[g - 1] : (periodic ? row[count - 1] : T(0));
      part[k] = row[g] - there;
    }
  }
}

// part[k] = D(source) across rows: `there` is the neighbouring row (nullptr: zero)
template <typename T>
inline void outer_slab_difference(T* __restrict__ part, const T* __restrict__ here, const T* __restrict__ there,
                                  int64_t n, bool forward) {
  if (there == nullptr) {
    for (int64_t k = 0; k < n; ++k) part[k] = forward ? -here[k] : here[k];
  } else if (forward) {
    for (int64_t k = 0; k < n; ++k) part[k] = there[k] - here[k];
  } else {
    for (int64_t k = 0; k < n; ++k) part[k] = here[k] - there[k];
  }
}

// psi = b psi + a part, field += sign * coefficient * (psi + kappa part) along a row; the profiles vary
// along the row (kAlong, a slab of axis 2) or are one value (b[0], a[0], kappa[0]); coefficient per cell
// or the scalar coefficient_scalar
template <typename T, bool kAlong, bool kCoefficientTensor>
inline void slab_row(T* __restrict__ field, T* __restrict__ psi, const T* __restrict__ part, const T* __restrict__ b,
                     const T* __restrict__ a, const T* __restrict__ kappa, const T* __restrict__ coefficient,
                     T coefficient_scalar, T sign, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    const int64_t layer = kAlong ? k : 0;
    const T updated = b[layer] * psi[k] + a[layer] * part[k];
    psi[k] = updated;
    const T scale = sign * (kCoefficientTensor ? coefficient[k] : coefficient_scalar);
    field[k] += scale * (updated + kappa[layer] * part[k]);
  }
}

template <typename T, bool kAlong>
inline void dispatch_slab_row(const Slab<T>& slab, int64_t cell, int64_t layer, T* psi, const T* part, int64_t n) {
  T* field = slab.field + cell;
  const T* b = slab.b + layer;
  const T* a = slab.a + layer;
  const T* kappa = slab.kappa + layer;
  if (slab.coefficient == nullptr) {
    slab_row<T, kAlong, false>(field, psi, part, b, a, kappa, nullptr, slab.coefficient_scalar, slab.sign, n);
  } else {
    slab_row<T, kAlong, true>(field, psi, part, b, a, kappa, slab.coefficient + cell, T(0), slab.sign, n);
  }
}

// one slab, rows (along axis 2) in parallel: the difference of a row into a buffer, then the update
template <typename T>
void cpml_slab(const Slab<T>& slab, const int64_t* shape, bool forward, bool periodic) {
  int64_t slab_shape[3] = {shape[0], shape[1], shape[2]};
  slab_shape[slab.axis] = slab.thickness;
  const int64_t m1 = slab_shape[1], m2 = slab_shape[2];
  const int64_t strides[3] = {shape[1] * shape[2], shape[2], 1};
  const int64_t count = shape[slab.axis];
  const int64_t grain = std::max<int64_t>(1, 16384 / m2);
  at::parallel_for(0, slab_shape[0] * m1, grain, [&](int64_t begin, int64_t end) {
    std::vector<T> part(m2);
    for (int64_t row = begin; row < end; ++row) {
      int64_t index[3] = {row / m1, row % m1, 0};
      T* psi = slab.psi + row * m2;
      if (slab.axis == 2) {
        const int64_t row_start = index[0] * strides[0] + index[1] * strides[1];
        inner_slab_difference(part.data(), slab.source + row_start, slab.start, m2, count, forward, periodic);
        dispatch_slab_row<T, true>(slab, row_start + slab.start, 0, psi, part.data(), m2);
        continue;
      }
      const int64_t layer = index[slab.axis];
      index[slab.axis] += slab.start;  // the row's index in the field
      const int64_t cell = index[0] * strides[0] + index[1] * strides[1];
      const T* here = slab.source + cell;
      const int64_t neighbour = index[slab.axis] + (forward ? 1 : -1);
      const T* there = nullptr;
      if (neighbour >= 0 && neighbour < count) there = here + (forward ? 1 : -1) * strides[slab.axis];
      else if (periodic) there = here + ((forward ? 0 : count - 1) - index[slab.axis]) * strides[slab.axis];
      outer_slab_difference(part.data(), here, there, m2, forward);
      dispatch_slab_row<T, false>(slab, cell, layer, psi, part.data(), m2);
    }
  });
}

void check_array(const torch::Tensor& tensor, const torch::Tensor& reference, const char* what) {
  TORCH_CHECK(tensor.device().is_cpu(), "curl_update: ", what, " must be a CPU tensor");
  TORCH_CHECK(tensor.scalar_type() == reference.scalar_type(), "curl_update: ", what, " has dtype ",
              tensor.scalar_type(), ", the fields ", reference.scalar_type());
  TORCH_CHECK(tensor.sizes() == reference.sizes(), "curl_update: ", what, " has shape ", tensor.sizes(),
              ", the fields ", reference.sizes());
  TORCH_CHECK(tensor.is_contiguous(), "curl_update: ", what, " must be contiguous");
}

// In place: fields[c] = ca[c] * fields[c] + cb[c] * sum_t scales[c][t] * D(sources[c][t]) along axes[c][t].
void curl_update(std::vector<torch::Tensor> fields, std::vector<std::optional<torch::Tensor>> ca,
                 std::vector<double> ca_scalar, std::vector<std::optional<torch::Tensor>> cb,
                 std::vector<double> cb_scalar, std::vector<std::vector<torch::Tensor>> sources,
                 std::vector<std::vector<int64_t>> axes, std::vector<std::vector<double>> scales,
                 std::vector<bool> periodic, bool forward) {
  const size_t count = fields.size();
  TORCH_CHECK(count > 0, "curl_update: no fields");
  TORCH_CHECK(ca.size() == count && ca_scalar.size() == count && cb.size() == count &&
                  cb_scalar.size() == count && sources.size() == count && axes.size() == count &&
                  scales.size() == count,
              "curl_update: one ca, cb, sources, axes, scales entry per field expected");
  TORCH_CHECK(periodic.size() == 3, "curl_update: periodic must hold 3 flags");
  const torch::Tensor& reference = fields[0];
  TORCH_CHECK(reference.dim() == 3, "curl_update: fields must be 3D, got ", reference.dim(), "D");
  TORCH_CHECK(reference.scalar_type() == torch::kFloat || reference.scalar_type() == torch::kDouble,
              "curl_update: fields must be float32 or float64");
  for (size_t c = 0; c < count; ++c) {
    check_array(fields[c], reference, "a field");
    if (ca[c]) check_array(*ca[c], reference, "ca");
    if (cb[c]) check_array(*cb[c], reference, "cb");
    TORCH_CHECK(sources[c].size() == axes[c].size() && sources[c].size() == scales[c].size(),
                "curl_update: one axis and scale per source expected");
    for (size_t t = 0; t < sources[c].size(); ++t) {
      check_array(sources[c][t], reference, "a source");
      TORCH_CHECK(axes[c][t] >= 0 && axes[c][t] < 3, "curl_update: axis must be 0, 1 or 2");
      TORCH_CHECK(reference.size(axes[c][t]) >= 2, "curl_update: a difference axis needs >= 2 nodes");
    }
  }
  const int64_t shape[3] = {reference.size(0), reference.size(1), reference.size(2)};
  const bool periodic_flags[3] = {periodic[0], periodic[1], periodic[2]};
  AT_DISPATCH_FLOATING_TYPES(reference.scalar_type(), "curl_update", [&] {
    std::vector<Component<scalar_t>> components(count);
    for (size_t c = 0; c < count; ++c) {
      Component<scalar_t>& component = components[c];
      component.field = fields[c].data_ptr<scalar_t>();
      component.ca = ca[c] ? ca[c]->data_ptr<scalar_t>() : nullptr;
      component.cb = cb[c] ? cb[c]->data_ptr<scalar_t>() : nullptr;
      component.ca_scalar = scalar_t(ca_scalar[c]);
      component.cb_scalar = scalar_t(cb_scalar[c]);
      for (size_t t = 0; t < sources[c].size(); ++t) {
        component.terms.push_back({sources[c][t].data_ptr<scalar_t>(), axes[c][t], scalar_t(scales[c][t])});
      }
    }
    curl_update_impl(components, shape, periodic_flags, forward);
  });
}

void check_profile(const torch::Tensor& profile, const torch::Tensor& reference, int64_t thickness,
                   const char* what) {
  TORCH_CHECK(profile.device().is_cpu() && profile.scalar_type() == reference.scalar_type(), "cpml_update: ",
              what, " must be a CPU tensor of the fields' dtype");
  TORCH_CHECK(profile.is_contiguous() && profile.numel() == thickness, "cpml_update: ", what,
              " must be contiguous with one value per slab layer (", thickness, "), got ", profile.sizes());
}

// In place, slab s after slab s - 1: psi[s] = b[s] psi[s] + a[s] D(sources[s]), fields[s] += signs[s] *
// coefficient[s] * (psi[s] + kappa[s] D(sources[s])) on the layers starts[s] .. starts[s] + thickness - 1
// along axes[s] (thickness = psi[s].size(axes[s])).
void cpml_update(std::vector<torch::Tensor> fields, std::vector<torch::Tensor> sources, std::vector<torch::Tensor> psi,
                 std::vector<torch::Tensor> b, std::vector<torch::Tensor> a, std::vector<torch::Tensor> kappa,
                 std::vector<std::optional<torch::Tensor>> coefficient, std::vector<double> coefficient_scalar,
                 std::vector<int64_t> axes, std::vector<int64_t> starts, std::vector<double> signs,
                 std::vector<bool> periodic, bool forward) {
  const size_t count = fields.size();
  TORCH_CHECK(sources.size() == count && psi.size() == count && b.size() == count && a.size() == count &&
                  kappa.size() == count && coefficient.size() == count && coefficient_scalar.size() == count &&
                  axes.size() == count && starts.size() == count && signs.size() == count,
              "cpml_update: one source, psi, b, a, kappa, coefficient, axis, start and sign per field expected");
  TORCH_CHECK(periodic.size() == 3, "cpml_update: periodic must hold 3 flags");
  if (count == 0) return;
  const torch::Tensor& reference = fields[0];
  TORCH_CHECK(reference.dim() == 3, "cpml_update: fields must be 3D, got ", reference.dim(), "D");
  TORCH_CHECK(reference.scalar_type() == torch::kFloat || reference.scalar_type() == torch::kDouble,
              "cpml_update: fields must be float32 or float64");
  for (size_t s = 0; s < count; ++s) {
    check_array(fields[s], reference, "a field");
    check_array(sources[s], reference, "a source");
    if (coefficient[s]) check_array(*coefficient[s], reference, "a coefficient");
    TORCH_CHECK(axes[s] >= 0 && axes[s] < 3, "cpml_update: axis must be 0, 1 or 2");
    TORCH_CHECK(psi[s].dim() == 3 && psi[s].is_contiguous() && psi[s].scalar_type() == reference.scalar_type(),
                "cpml_update: psi must be a contiguous 3D tensor of the fields' dtype");
    const int64_t thickness = psi[s].size(axes[s]);
    for (int64_t d = 0; d < 3; ++d) {
      TORCH_CHECK(d == axes[s] || psi[s].size(d) == reference.size(d), "cpml_update: psi has shape ",
                  psi[s].sizes(), ", the fields ", reference.sizes());
    }
    TORCH_CHECK(starts[s] >= 0 && starts[s] + thickness <= reference.size(axes[s]),
                "cpml_update: a slab reaches beyond the grid");
    check_profile(b[s], reference, thickness, "b");
    check_profile(a[s], reference, thickness, "a");
    check_profile(kappa[s], reference, thickness, "kappa");
  }
  const int64_t shape[3] = {reference.size(0), reference.size(1), reference.size(2)};
  AT_DISPATCH_FLOATING_TYPES(reference.scalar_type(), "cpml_update", [&] {
    for (size_t s = 0; s < count; ++s) {
      const Slab<scalar_t> slab{fields[s].data_ptr<scalar_t>(),
                                sources[s].data_ptr<scalar_t>(),
                                psi[s].data_ptr<scalar_t>(),
                                b[s].data_ptr<scalar_t>(),
                                a[s].data_ptr<scalar_t>(),
                                kappa[s].data_ptr<scalar_t>(),
                                coefficient[s] ? coefficient[s]->data_ptr<scalar_t>() : nullptr,
                                scalar_t(coefficient_scalar[s]),
                                axes[s],
                                starts[s],
                                psi[s].size(axes[s]),
                                scalar_t(signs[s])};
      cpml_slab(slab, shape, forward, periodic[axes[s]]);
    }
  });
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("curl_update", &curl_update, "fused in-place Yee update of a group of field components");
  module.def("cpml_update", &cpml_update, "in-place CPML auxiliary fields and corrections, slab by slab");
}
