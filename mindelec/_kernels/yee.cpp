// Compiled CPU kernel of mindelec.fdtd's forward-only Yee update (see mindelec/_kernels/__init__.py).
//
// curl_update updates a group of field components (all H, or all E) in place, in one pass over the grid:
//
//   F_c = ca_c * F_c + cb_c * (sum_t scale_t * D_t(S_t) + sum_s sign_s * (psi_s + kappa_s * D_s(S_s)))
//
// D_t is the forward (H update) or backward (E update) difference of the source component S_t along
// axis_t, scale_t = sign_t / spacing_t, ca and cb are per-component scalars or per-cell tensors. Beyond
// the last node a difference takes the source from the other end (periodic axis) or as zero (PEC wall).
//
// The second sum is the CPML's: each slab s belongs to one term t of one component (its axis, its source;
// one slab per side of the axis) and covers the layers start_s .. start_s + thickness_s - 1 along that
// axis, where first
//
//   psi_s = b_s * psi_s + a_s * D_t(S_t)
//
// (D not divided by the spacing: a and kappa hold 1 / spacing; b, a, kappa are the profiles along the
// axis, one value per layer). A cell in two slabs (the corners, or both sides of a grid thinner than two
// slabs) takes both corrections.
//
// Every tensor is a contiguous (n0, n1, n2) array (the caller puts the simulation's axes last, so that
// the innermost axis is long). The grid is walked row by row (rows along n2, parallelised with
// at::parallel_for, so the kernel follows torch.set_num_threads); each row's curl is summed term by term
// into a row buffer in L1, the CPML corrections of the slabs the row crosses added to it, then the field
// row is updated once. Neighbouring rows of the sources are re-read from cache, so every field is read
// once and written once, and every source read about once, per group: 36 B per cell per component group
// in 3D float32, at the memory-bandwidth limit, plus each slab's psi read and written once.
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <optional>
#include <vector>

namespace {

template <typename T>
struct Slab {  // one CPML slab of a term (see the header)
  T* psi;
  const T* b;
  const T* a;
  const T* kappa;
  int64_t start;  // first layer of the slab along the term's axis
  int64_t thickness;
  T sign;
};

template <typename T>
struct Term {
  const T* source;
  int64_t axis;
  T scale;
  std::vector<Slab<T>> slabs;
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

// part[k] = D(source) at the cells start .. start + n - 1 of a row along axis 2 (count cells in the row)
template <typename T>
inline void inner_difference(T* __restrict__ part, const T* __restrict__ here, int64_t start, int64_t n,
                             int64_t count, bool forward, bool periodic) {
  for (int64_t k = 0; k < n; ++k) {
    const int64_t g = start + k;
    if (forward) {
      part[k] = (g + 1 < count ? here[g + 1] : (periodic ? here[0] : T(0))) - here[g];
    } else {
      part[k] = here[g] - (g > 0 ? here[g - 1] : (periodic ? here[count - 1] : T(0)));
    }
  }
}

// part[k] = D(source)[k] across rows: the neighbouring row is `there` (nullptr: zero)
template <typename T>
inline void outer_difference(T* __restrict__ part, const T* __restrict__ here, const T* __restrict__ there,
                             int64_t n, bool forward) {
  if (there == nullptr) {
    for (int64_t k = 0; k < n; ++k) part[k] = forward ? -here[k] : here[k];
  } else if (forward) {
    for (int64_t k = 0; k < n; ++k) part[k] = there[k] - here[k];
  } else {
    for (int64_t k = 0; k < n; ++k) part[k] = here[k] - there[k];
  }
}

// psi = b psi + a part, curl += sign (psi + kappa part) over n cells; the profiles vary along them
// (kAlong: a slab of axis 2, the row's own axis) or are one value (b[0], a[0], kappa[0])
template <typename T, bool kAlong>
inline void slab_row(T* __restrict__ curl, T* __restrict__ psi, const T* __restrict__ part, const T* __restrict__ b,
                     const T* __restrict__ a, const T* __restrict__ kappa, T sign, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    const int64_t layer = kAlong ? k : 0;
    const T updated = b[layer] * psi[k] + a[layer] * part[k];
    psi[k] = updated;
    curl[k] += sign * (updated + kappa[layer] * part[k]);
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

// whether the row at `index` (its indices along axes 0 and 1) lies in one of the slabs of a term across
// rows (axis 0 or 1)
template <typename T>
inline bool in_slab(const Term<T>& term, const int64_t* index) {
  for (const Slab<T>& slab : term.slabs) {
    const int64_t layer = index[term.axis] - slab.start;
    if (layer >= 0 && layer < slab.thickness) return true;
  }
  return false;
}

// the CPML corrections of a term along the row (axis 2) into curl: the slabs' differences into part
template <typename T>
inline void add_row_slab_corrections(T* curl, T* part, const Term<T>& term, const T* here, int64_t row, int64_t n2,
                                     bool forward, bool periodic) {
  for (const Slab<T>& slab : term.slabs) {
    inner_difference(part, here, slab.start, slab.thickness, n2, forward, periodic);
    slab_row<T, true>(curl + slab.start, slab.psi + row * slab.thickness, part, slab.b, slab.a, slab.kappa,
                      slab.sign, slab.thickness);
  }
}

// the CPML corrections of a term across rows into curl (part: the term's difference along the whole row)
template <typename T>
inline void add_layer_slab_corrections(T* curl, const T* part, const Term<T>& term, const int64_t* index,
                                       int64_t n1, int64_t n2) {
  for (const Slab<T>& slab : term.slabs) {
    const int64_t layer = index[term.axis] - slab.start;
    if (layer < 0 || layer >= slab.thickness) continue;
    const int64_t slab_row_index = term.axis == 0 ? layer * n1 + index[1] : index[0] * slab.thickness + layer;
    slab_row<T, false>(curl, slab.psi + slab_row_index * n2, part, slab.b + layer, slab.a + layer,
                       slab.kappa + layer, slab.sign, n2);
  }
}

template <typename T>
void curl_update_impl(std::vector<Component<T>>& components, const int64_t* shape, const bool* periodic,
                      bool forward) {
  const int64_t n0 = shape[0], n1 = shape[1], n2 = shape[2];
  const int64_t strides[2] = {n1 * n2, n2};
  const int64_t grain = std::max<int64_t>(1, 16384 / n2);
  at::parallel_for(0, n0 * n1, grain, [&](int64_t begin, int64_t end) {
    std::vector<T> curl(n2), part(n2);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t index[2] = {row / n1, row % n1};
      const int64_t offset = row * n2;
      for (const Component<T>& component : components) {
        std::fill(curl.begin(), curl.end(), T(0));
        for (const Term<T>& term : component.terms) {
          const T* here = term.source + offset;
          if (term.axis == 2) {
            add_inner_difference(curl.data(), here, term.scale, n2, forward, periodic[2]);
            add_row_slab_corrections(curl.data(), part.data(), term, here, row, n2, forward, periodic[2]);
            continue;
          }
          const int64_t count = term.axis == 0 ? n0 : n1;
          int64_t neighbour = index[term.axis] + (forward ? 1 : -1);
          if (neighbour < 0 || neighbour >= count) {
            if (periodic[term.axis]) neighbour = forward ? 0 : count - 1;
            else neighbour = -1;
          }
          const T* there = nullptr;
          if (neighbour >= 0) there = here + (neighbour - index[term.axis]) * strides[term.axis];
          if (!in_slab(term, index)) {
            add_outer_difference(curl.data(), here, there, term.scale, n2, forward);
            continue;
          }
          outer_difference(part.data(), here, there, n2, forward);
          for (int64_t k = 0; k < n2; ++k) curl[k] += term.scale * part[k];
          add_layer_slab_corrections(curl.data(), part.data(), term, index, n1, n2);
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

void check_array(const torch::Tensor& tensor, const torch::Tensor& reference, const char* what) {
  TORCH_CHECK(tensor.device().is_cpu(), "curl_update: ", what, " must be a CPU tensor");
  TORCH_CHECK(tensor.scalar_type() == reference.scalar_type(), "curl_update: ", what, " has dtype ",
              tensor.scalar_type(), ", the fields ", reference.scalar_type());
  TORCH_CHECK(tensor.sizes() == reference.sizes(), "curl_update: ", what, " has shape ", tensor.sizes(),
              ", the fields ", reference.sizes());
  TORCH_CHECK(tensor.is_contiguous(), "curl_update: ", what, " must be contiguous");
}

void check_profile(const torch::Tensor& profile, const torch::Tensor& reference, int64_t thickness,
                   const char* what) {
  TORCH_CHECK(profile.device().is_cpu() && profile.scalar_type() == reference.scalar_type(), "curl_update: ",
              what, " must be a CPU tensor of the fields' dtype");
  TORCH_CHECK(profile.is_contiguous() && profile.numel() == thickness, "curl_update: ", what,
              " must be contiguous with one value per slab layer (", thickness, "), got ", profile.sizes());
}

// In place: fields[c] = ca[c] * fields[c] + cb[c] * (sum_t scales[c][t] * D(sources[c][t]) along axes[c][t]
// + the CPML corrections of the slabs). Slab s belongs to term slab_terms[s] of field slab_fields[s]; its
// layers are starts[s] .. starts[s] + thickness - 1 along that term's axis (thickness = psi[s].size(axis));
// psi[s] = b[s] psi[s] + a[s] D, then signs[s] (psi[s] + kappa[s] D) joins the curl.
void curl_update(std::vector<torch::Tensor> fields, std::vector<std::optional<torch::Tensor>> ca,
                 std::vector<double> ca_scalar, std::vector<std::optional<torch::Tensor>> cb,
                 std::vector<double> cb_scalar, std::vector<std::vector<torch::Tensor>> sources,
                 std::vector<std::vector<int64_t>> axes, std::vector<std::vector<double>> scales,
                 std::vector<bool> periodic, bool forward, std::vector<int64_t> slab_fields,
                 std::vector<int64_t> slab_terms, std::vector<torch::Tensor> psi, std::vector<torch::Tensor> b,
                 std::vector<torch::Tensor> a, std::vector<torch::Tensor> kappa, std::vector<int64_t> starts,
                 std::vector<double> signs) {
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
  const size_t slabs = slab_fields.size();
  TORCH_CHECK(slab_terms.size() == slabs && psi.size() == slabs && b.size() == slabs && a.size() == slabs &&
                  kappa.size() == slabs && starts.size() == slabs && signs.size() == slabs,
              "curl_update: one field, term, psi, b, a, kappa, start and sign per slab expected");
  std::vector<int64_t> slab_axes(slabs);
  for (size_t s = 0; s < slabs; ++s) {
    TORCH_CHECK(slab_fields[s] >= 0 && slab_fields[s] < static_cast<int64_t>(count) && slab_terms[s] >= 0 &&
                    slab_terms[s] < static_cast<int64_t>(sources[slab_fields[s]].size()),
                "curl_update: slab ", s, " names field ", slab_fields[s], " term ", slab_terms[s],
                ", which does not exist");
    const int64_t axis = slab_axes[s] = axes[slab_fields[s]][slab_terms[s]];
    TORCH_CHECK(psi[s].dim() == 3 && psi[s].is_contiguous() && psi[s].scalar_type() == reference.scalar_type(),
                "curl_update: psi must be a contiguous 3D tensor of the fields' dtype");
    const int64_t thickness = psi[s].size(axis);
    for (int64_t d = 0; d < 3; ++d) {
      TORCH_CHECK(d == axis || psi[s].size(d) == reference.size(d), "curl_update: psi has shape ",
                  psi[s].sizes(), ", the fields ", reference.sizes());
    }
    TORCH_CHECK(starts[s] >= 0 && starts[s] + thickness <= reference.size(axis),
                "curl_update: a slab reaches beyond the grid");
    check_profile(b[s], reference, thickness, "b");
    check_profile(a[s], reference, thickness, "a");
    check_profile(kappa[s], reference, thickness, "kappa");
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
        component.terms.push_back({sources[c][t].data_ptr<scalar_t>(), axes[c][t], scalar_t(scales[c][t]), {}});
      }
    }
    for (size_t s = 0; s < slabs; ++s) {
      components[slab_fields[s]].terms[slab_terms[s]].slabs.push_back(
          {psi[s].data_ptr<scalar_t>(), b[s].data_ptr<scalar_t>(), a[s].data_ptr<scalar_t>(),
           kappa[s].data_ptr<scalar_t>(), starts[s], psi[s].size(slab_axes[s]), scalar_t(signs[s])});
    }
    curl_update_impl(components, shape, periodic_flags, forward);
  });
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("curl_update", &curl_update,
             "fused in-place Yee update of a group of field components, with their CPML corrections");
}
