// CPU kernels for cumsum / cumprod (and cumprod's backward), sort / topk and flip. The per-line math is shared
// with the CUDA kernels (kernels/common/scan.h, kernels/common/sort.h); loops are serial.
#include <algorithm>
#include <numeric>
#include <vector>

#include <volt/kernels/backend/registry.h>
#include <volt/kernels/backend/tensor_ops.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/scan.h>
#include <volt/kernels/common/sort.h>

namespace volt::cpu {

namespace {

void cumsum(const Tensor& out, const Tensor& in, int64_t outer, int64_t D, int64_t inner, bool reverse) {
  dispatch_numeric(out.dtype(), "cumsum", [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data_ptr());
    const T* a = static_cast<const T*>(in.data_ptr());
    for (int64_t p = 0; p < outer; ++p)
      for (int64_t k = 0; k < inner; ++k) cumsum_line(o + p * D * inner + k, a + p * D * inner + k, D, inner, reverse);
  });
}

void cumprod(const Tensor& out, const Tensor& in, int64_t outer, int64_t D, int64_t inner) {
  dispatch_numeric(out.dtype(), "cumprod", [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data_ptr());
    const T* a = static_cast<const T*>(in.data_ptr());
    for (int64_t p = 0; p < outer; ++p)
      for (int64_t k = 0; k < inner; ++k) cumprod_line(o + p * D * inner + k, a + p * D * inner + k, D, inner);
  });
}

void cumprod_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& in, int64_t outer, int64_t D,
                      int64_t inner) {
  dispatch_f32_f64(grad_in.dtype(), "cumprod_backward", [&](auto tag) {
    using T = decltype(tag);
    T* gi = static_cast<T*>(grad_in.data_ptr());
    const T* go = static_cast<const T*>(grad_out.data_ptr());
    const T* x = static_cast<const T*>(in.data_ptr());
    for (int64_t p = 0; p < outer; ++p)
      for (int64_t k = 0; k < inner; ++k) {
        const int64_t base = p * D * inner + k;
        cumprod_backward_line(gi + base, go + base, x + base, D, inner);
      }
  });
}

void sort(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t outer, int64_t D, int64_t inner,
          int64_t k, bool descending) {
  dispatch_all(in.dtype(), "sort", [&](auto tag) {
    using T = decltype(tag);
    using K = sort_key_t<T>;
    const T* a = static_cast<const T*>(in.data_ptr());
    T* v = static_cast<T*>(values.data_ptr());
    int64_t* ix = static_cast<int64_t*>(indices.data_ptr());
    std::vector<K> keys(static_cast<size_t>(D));
    std::vector<int64_t> order(static_cast<size_t>(D));
    for (int64_t p = 0; p < outer; ++p)
      for (int64_t q = 0; q < inner; ++q) {
        const T* line = a + p * D * inner + q;
        for (int64_t j = 0; j < D; ++j) keys[j] = static_cast<K>(line[j * inner]);
        std::iota(order.begin(), order.end(), int64_t{0});
        auto before = [&](int64_t i, int64_t j) { return sort_before(keys[i], i, keys[j], j, descending); };
        // A strict total order: the first k of a partial sort equal those of a full sort.
        if (k < D)
          std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
        else
          std::sort(order.begin(), order.end(), before);
        const int64_t base = p * k * inner + q;
        for (int64_t j = 0; j < k; ++j) {
          v[base + j * inner] = line[order[j] * inner];
          ix[base + j * inner] = order[j];
        }
      }
  });
}

void flip(const Tensor& out, const Tensor& in, const FlipGeometry& g) {
  const int64_t total = out.numel();
  dispatch_all(out.dtype(), "flip", [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data_ptr());
    const T* a = static_cast<const T*>(in.data_ptr());
    for (int64_t t = 0; t < total; ++t) o[t] = a[flip_source_offset(g, t)];
  });
}

}  // namespace

constexpr backend::TensorOpKernels tensor_op_kernels{
    .cumsum = {cumsum, backend::kNumeric},
    .cumprod = {cumprod, backend::kNumeric},
    .cumprod_backward = {cumprod_backward, backend::kF32F64},
    .sort = {sort, backend::kAllDTypes},
    .flip = {flip, backend::kAllDTypes},
};

}  // namespace volt::cpu
