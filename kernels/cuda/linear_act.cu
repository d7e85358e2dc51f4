// The fused linear layer on CUDA. Forward: one cuBLASLt matmul whose epilogue adds the bias and applies the
// activation (BIAS, RELU_BIAS, GELU_BIAS; GELU_AUX_BIAS also writes the pre-activation the backward reads), for
// f32 (TF32 only when set_allow_tf32(true)), f16 and bf16. cuBLASLt's GELU is the tanh approximation, so exact
// GELU, f64, a GELU pre-activation whose leading dimension is not a multiple of 8, and any configuration the
// heuristics reject run as the cuBLAS GEMM plus one bias/activation kernel. A configuration's descriptors and
// algorithm are chosen once and kept in a PlanCache. Backward: one column reduction (kernels/cuda/col_reduce.cuh)
// computes grad_pre = grad_out * act' as it loads and sums it into the bias gradient; the two weight/input GEMMs
// are the op's. Where grad_out is itself a product (fused_mlp: the second layer's input gradient), matmul_act_bwd
// runs that product as one cuBLASLt matmul whose DGELU_BGRAD epilogue applies act' and sums the bias gradient.
// Row-major to column-major as in gemm.cu: C^T (n, m) = op(B)^T (n, k) @ op(A)^T (k, m), so the bias runs
// along the column-major output's rows (length n), which is what cuBLASLt's bias epilogues broadcast.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include <volt/kernels/backend/linalg.h>
#include <volt/kernels/backend/scratch.h>
#include <volt/kernels/common/bias_act.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/kernel_paths.h>
#include <volt/kernels/common/plan_cache.h>
#include <volt/kernels/common/small_gemm.h>
#include <volt/kernels/cuda/col_reduce.cuh>
#include <volt/kernels/cuda/cublas_check.h>
#include <volt/kernels/cuda/gemm.h>
#include <volt/kernels/cuda/launch_stream.h>
#include <volt/kernels/cuda/pack.cuh>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/cuda_check.h>
#include <volt/runtime/cuda_graph.h>

namespace volt::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{4} << 20;

template <class T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// ---- fallback and backward kernels ---------------------------------------------------------------------------

// out (rows, cols) = act(out + bias), pre = out + bias when pre is not null.
template <class T, Activation act>
__global__ void bias_act_fwd_kernel(T* out, T* pre, const T* bias, int64_t rows, int64_t cols) {
  using A = acc_t<T>;
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const A z = A(out[i]) + (bias ? A(bias[i % cols]) : A(0));
    if (pre) pre[i] = T(z);
    out[i] = T(biasact::forward<act>(z));
  }
}

// grad_pre = grad_out * act'(saved) of C consecutive columns of a row (C == 1, or one 16-byte pack: Pack<T>::kLen),
// written when gp is not null and added to the bias gradient's column sums (kernels/cuda/col_reduce.cuh).
template <class T, Activation act, int C>
struct BiasActLoad {
  T* gp;
  const T* g;
  const T* saved;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t m, acc_t<T>* acc) const {
    using A = acc_t<T>;
    const int64_t k = r * cols + m;
    if constexpr (C == 1) {
      const T v = T(biasact::backward<act>(A(g[k]), saved ? A(saved[k]) : A(0)));
      if (gp) gp[k] = v;
      acc[0] += A(v);
    } else {
      const Pack<T> gv = load_pack(g + k);
      Pack<T> sv;
      if (saved) sv = load_pack(saved + k);
      Pack<T> out;
#pragma unroll
      for (int c = 0; c < C; ++c) {
        out.v[c] = T(biasact::backward<act>(A(gv.v[c]), saved ? A(sv.v[c]) : A(0)));
        acc[c] += A(out.v[c]);
      }
      if (gp) store_pack(gp + k, out);
    }
  }
};
template <class T>
struct BiasStore {
  T* gb;
  __device__ void operator()(int64_t j, int, acc_t<T> s) const {
    if (gb) gb[j] = T(s);
  }
};

void bias_act_launch(const Tensor& c, const Tensor& pre, const Tensor& bias, int64_t rows, int64_t cols,
                     Activation act) {
  const int64_t n = rows * cols;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535 * 16));
  dispatch_floating(c.dtype(), "linear_act_fwd", [&](auto tag) {
    using T = decltype(tag);
    biasact::with_activation(act, [&](auto ac) {
      bias_act_fwd_kernel<T, decltype(ac)::value><<<blocks, 256, 0, launch_stream()>>>(
          static_cast<T*>(c.data_ptr()), ptr_or_null<T>(pre), ptr_or_null<const T>(bias), rows, cols);
    });
  });
  VOLT_CUDA_CHECK_LAUNCH();
}

// ---- cuBLASLt --------------------------------------------------------------------------------------------------

cublasLtHandle_t lt_handle(const Device& device) {
  static std::mutex mu;
  static std::vector<cublasLtHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  if (handles.size() <= static_cast<size_t>(device.index)) handles.resize(device.index + 1, nullptr);
  cublasLtHandle_t& h = handles[device.index];
  if (!h) {
    VOLT_CHECK(!cuda_graph::is_capturing(device), "linear_act (CUDA): the first cuBLASLt call on ", device.str(),
               " ran during a CUDA graph capture, which cannot create its handle; run the step once eagerly "
               "before capturing it");
    VOLT_CUBLAS_CHECK(cublasLtCreate(&h));
  }
  return h;
}

// The epilogue that does act (with the bias when has_bias, writing the pre-activation when need_pre), or false
// when cuBLASLt has none: exact GELU (its GELU is the tanh form), ReLU with a pre-activation (its ReLU aux is a
// bit mask; the op saves the output instead).
bool lt_epilogue(Activation act, bool has_bias, bool need_pre, cublasLtEpilogue_t& e) {
  switch (act) {
    case Activation::None:
      if (need_pre) return false;
      e = has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
      return true;
    case Activation::ReLU:
      if (need_pre) return false;
      e = has_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
      return true;
    case Activation::GELUTanh:
      if (need_pre) e = has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      else e = has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
      return true;
    case Activation::GELU: return false;
  }
  return false;
}

// The largest power of two (<= 256) dividing a pointer: cuBLASLt's heuristics must be told the operands'
// alignment, and it is part of the plan's key.
int64_t alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int64_t a = 256;
  while (a > 1 && v % static_cast<uintptr_t>(a) != 0) a /= 2;
  return a;
}

using LtKey = PlanKey<17>;

// The heuristics' best few algorithms, in their order: a call uses the first one the matmul has not turned down.
constexpr int kLtAlgos = 4;

struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;  // cuBLASLt's A (our B), B (our A), C = D
  cublasLtMatmulAlgo_t algos[kLtAlgos]{};
  size_t workspaces[kLtAlgos]{};
  int count = 0;           // 0: the heuristics found no algorithm; the caller falls back
  mutable std::atomic<int> next{0};  // the first algorithm cublasLtMatmul has not turned down (count: none left)
  mutable std::mutex mu;   // bias and aux pointers are set on `op` per call
  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

PlanCache<LtKey, LtPlan, PlanKeyHash<17>>& lt_plans() {
  static PlanCache<LtKey, LtPlan, PlanKeyHash<17>> cache(256);
  return cache;
}

template <class V>
void set_attr(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, const V& v) {
  VOLT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, attr, &v, sizeof(v)));
}

// The epilogue's bias and aux pointers are set before the heuristics are asked: they read them to learn the
// pointers' alignment (cublasLt.h), which is part of the plan's key; later calls set their own.
std::shared_ptr<LtPlan> make_plan(cublasLtHandle_t h, const GemmDesc& d, cudaDataType_t type,
                                  cublasComputeType_t compute, cublasLtEpilogue_t epi, void* bias, void* aux,
                                  const int64_t (&align)[4]) {
  auto p = std::make_shared<LtPlan>();
  VOLT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, compute, CUDA_R_32F));
  const cublasOperation_t opb = d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, opa = d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attr(p->op, CUBLASLT_MATMUL_DESC_TRANSA, opb);
  set_attr(p->op, CUBLASLT_MATMUL_DESC_TRANSB, opa);
  set_attr(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
  set_attr(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias));
  if (aux) {
    set_attr(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{d.n});
    set_attr(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<const void*>(aux));
  }
  // Stored column-major shapes: our row-major B is (k, n) or, transposed, (n, k); column-major that is (n, k)
  // or (k, n). Likewise A.
  VOLT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, type, d.trans_b ? d.k : d.n, d.trans_b ? d.n : d.k, d.ldb));
  VOLT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, type, d.trans_a ? d.m : d.k, d.trans_a ? d.k : d.m, d.lda));
  VOLT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->ld, type, d.n, d.m, d.ldc));
  cublasLtMatmulPreference_t pref = nullptr;
  VOLT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kWorkspaceBytes;
  const uint32_t al[4] = {static_cast<uint32_t>(align[0]), static_cast<uint32_t>(align[1]),
                          static_cast<uint32_t>(align[2]), static_cast<uint32_t>(align[3])};
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof(al[0]));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof(al[1]));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof(al[2]));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof(al[3]));
  cublasLtMatmulHeuristicResult_t results[kLtAlgos]{};
  int returned = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(h, p->op, p->la, p->lb, p->ld, p->ld, pref, kLtAlgos, results, &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < returned && i < kLtAlgos; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) {
      p->algos[p->count] = results[i].algo;
      p->workspaces[p->count] = results[i].workspaceSize;
      ++p->count;
    }
  return p;
}

// cuBLASLt's type and compute type for c's dtype; false for f64 (cuBLASLt has no epilogues for it).
bool lt_types(const GemmDesc& d, DType dt, cudaDataType_t& type, cublasComputeType_t& compute) {
  compute = CUBLAS_COMPUTE_32F;
  switch (dt) {
    case DType::f32:
      type = CUDA_R_32F;
      if (d.allow_tf32) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
      return true;
    case DType::f16: type = CUDA_R_16F; return true;
    case DType::bf16: type = CUDA_R_16BF; return true;
    default: return false;
  }
}

// One cuBLASLt matmul c = op(A) @ op(B) of row-major operands as d describes them (make_plan swaps them into
// cuBLASLt's column-major order) with epilogue `epi`, its bias (or bias gradient) pointer `bias` and aux
// (pre-activation) pointer `aux` set on the plan's descriptor for this call. False when the heuristics found no
// algorithm or the matmul turned it down (nothing ran; the caller falls back), and for a scaled product or an
// accumulating one (alpha != 1 or beta != 0), which the epilogues here do not take.
bool lt_run(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c, cublasLtEpilogue_t epi,
            void* bias, void* aux) {
  if (d.alpha != 1.0 || d.beta != 0.0) return false;
  // One type for A, B and C (the plan's layouts say so): a mixed product (half operands, f32 result) is gemm()'s.
  if (a.dtype() != c.dtype() || b.dtype() != c.dtype()) return false;
  cudaDataType_t type;
  cublasComputeType_t compute;
  if (!lt_types(d, c.dtype(), type, compute)) return false;
  const int64_t align[4] = {alignment(b.data_ptr()), alignment(a.data_ptr()), alignment(c.data_ptr()),
                            alignment(c.data_ptr())};
  const LtKey key{{c.device().index, static_cast<int64_t>(c.dtype()), d.m, d.n, d.k, d.trans_a, d.trans_b, d.lda,
                   d.ldb, d.ldc, static_cast<int64_t>(epi), compute, align[0], align[1], align[2],
                   aux != nullptr ? alignment(aux) : 0, bias != nullptr ? alignment(bias) : 0}};
  cublasLtHandle_t h = lt_handle(c.device());
  std::shared_ptr<const LtPlan> plan =
      lt_plans().get_or_create(key, [&] { return make_plan(h, d, type, compute, epi, bias, aux, align); });
  const float alpha = 1.0f, beta = 0.0f;
  for (int i = plan->next.load(std::memory_order_relaxed); i < plan->count;
       i = plan->next.load(std::memory_order_relaxed)) {
    const size_t wsb = plan->workspaces[i];
    Tensor ws = wsb > 0 ? backend::scratch_bytes(wsb, c.device()) : Tensor();
    cublasStatus_t st;
    {
      std::lock_guard<std::mutex> lock(plan->mu);
      set_attr(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias));
      if (aux != nullptr)
        set_attr(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<const void*>(aux));
      st = cublasLtMatmul(h, plan->op, &alpha, b.data_ptr(), plan->la, a.data_ptr(), plan->lb, &beta, c.data_ptr(),
                          plan->ld, c.data_ptr(), plan->ld, &plan->algos[i], ws.defined() ? ws.data_ptr() : nullptr,
                          wsb, launch_stream());
    }
    if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE) {
      VOLT_CUBLAS_CHECK(st);
      return true;
    }
    // The heuristics offered an algorithm that the matmul then turns down (nothing ran): the next one from now on,
    // and with none left the plain GEMM and the bias/activation kernel take this shape.
    plan->next.compare_exchange_strong(i, i + 1, std::memory_order_relaxed);
  }
  return false;
}

// Runs the forward as one cuBLASLt matmul; false when no epilogue or algorithm fits (nothing was launched).
bool lt_forward(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c,
                const Tensor& pre, Activation act) {
  cublasLtEpilogue_t epi;
  const bool need_pre = pre.defined();
  if (!lt_epilogue(act, bias.defined(), need_pre, epi)) return false;
  if (need_pre && d.n % 8 != 0) return false;  // the GELU aux's leading dimension must be a multiple of 8
  if (bias.defined() && alignment(bias.data_ptr()) < 16) return false;
  if (need_pre && alignment(pre.data_ptr()) < 16) return false;  // the aux (pre-activation) output, likewise
  return lt_run(d, a, b, c, epi, bias.defined() ? bias.data_ptr() : nullptr, need_pre ? pre.data_ptr() : nullptr);
}

// The GELU backward through the product, as one cuBLASLt matmul: DGELU multiplies each product element by the tanh
// GELU's derivative at the saved pre-activation (the aux input, laid out as the forward's GELU_AUX wrote it), and
// DGELU_BGRAD also sums the result's columns into the bias gradient. False when it does not apply or no algorithm
// fits (nothing was launched). VOLT_DISABLE_KERNELS=lt_dgelu turns it off (the product and bias_act_bwd then run).
bool lt_backward(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& grad_pre, const Tensor& grad_bias,
                 const Tensor& saved, Activation act) {
  if (kernel_paths::disabled(kernel_paths::kLtDgelu)) return false;
  if (act != Activation::GELUTanh || !saved.defined()) return false;
  if (d.n % 8 != 0 || alignment(saved.data_ptr()) < 16) return false;  // the aux's leading dimension and alignment
  if (grad_bias.defined() && alignment(grad_bias.data_ptr()) < 16) return false;
  const cublasLtEpilogue_t epi = grad_bias.defined() ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
  if (!lt_run(d, a, b, grad_pre, epi, grad_bias.defined() ? grad_bias.data_ptr() : nullptr, saved.data_ptr()))
    return false;
  kernel_paths::note_taken(kernel_paths::kLtDgelu);
  return true;
}

// c = op(A) @ op(B), or zeros when the product is empty over k (nothing to do for an empty c).
void product_or_zeros(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c) {
  if (d.m == 0 || d.n == 0) return;
  if (d.k > 0)
    gemm(d, a, b, c);
  else
    VOLT_CUDA_CHECK(cudaMemsetAsync(c.data_ptr(), 0, c.nbytes(), launch_stream()));
}

// The weight gradient's product with the bias gradient in its BGRADB epilogue: cuBLASLt's B is our A (the output
// gradient, (k, m) read transposed), and BGRADB sums it over k into m values, in D's dtype. False when it does not
// apply or no algorithm fits (nothing was launched). VOLT_DISABLE_KERNELS=lt_bgrad turns it off.
bool lt_bgrad(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& grad_bias) {
  if (kernel_paths::disabled(kernel_paths::kLtBgrad)) return false;
  if (alignment(grad_bias.data_ptr()) < 16) return false;
  if (!lt_run(d, a, b, c, CUBLASLT_EPILOGUE_BGRADB, grad_bias.data_ptr(), nullptr)) return false;
  kernel_paths::note_taken(kernel_paths::kLtBgrad);
  return true;
}

}  // namespace

void linear_act_fwd(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c,
                    const Tensor& pre, Activation act) {
  if (d.m == 0 || d.n == 0) return;
  DeviceScope scope(c.device());
  check_cublas_dims(d, "linear_act_fwd");
  if (small_gemm_suits(d, c.dtype())) return linear_act_small(d, a, b, bias, c, pre, act);
  if (d.k > 0 && lt_forward(d, a, b, bias, c, pre, act)) return;
  GemmDesc g = d;
  g.beta = 0.0;
  if (d.k > 0) {
    gemm(g, a, b, c);
  } else {
    VOLT_CUDA_CHECK(cudaMemsetAsync(c.data_ptr(), 0, c.nbytes(), launch_stream()));
  }
  if (bias.defined() || act != Activation::None || pre.defined()) bias_act_launch(c, pre, bias, d.m, d.n, act);
}

void bias_act_bwd(const Tensor& grad_pre, const Tensor& grad_bias, const Tensor& grad_out, const Tensor& saved,
                  int64_t rows, int64_t cols, Activation act) {
  if (cols == 0) return;
  DeviceScope scope(grad_out.device());
  if (rows == 0) {
    if (grad_bias.defined())
      VOLT_CUDA_CHECK(cudaMemsetAsync(grad_bias.data_ptr(), 0, grad_bias.nbytes(), launch_stream()));
    return;
  }
  // One column reduction (split over row ranges when that fills the GPU) whose loads also write grad_pre; in
  // 16-byte packs where the rows allow.
  dispatch_floating(grad_out.dtype(), "bias_act_bwd", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    T* gp = ptr_or_null<T>(grad_pre);
    const T* g = static_cast<const T*>(grad_out.data_ptr());
    const T* sv = ptr_or_null<const T>(saved);
    const BiasStore<T> store{ptr_or_null<T>(grad_bias)};
    const bool sums = grad_bias.defined();  // else only grad_pre is written
    biasact::with_activation(act, [&](auto ac) {
      constexpr Activation a = decltype(ac)::value;
      if constexpr (std::is_same_v<A, float>) {
        constexpr int C = Pack<T>::kLen;
        if (!kernel_paths::disabled(kernel_paths::kPackedColumns) && packable<T>(cols, {gp, g, sv})) {
          cols::reduce<A, 1, C>(BiasActLoad<T, a, C>{gp, g, sv, cols}, store, rows, cols, grad_out.device(), sums);
          return;
        }
      }
      cols::reduce<A, 1>(BiasActLoad<T, a, 1>{gp, g, sv, cols}, store, rows, cols, grad_out.device(), sums);
    });
  });
}

void matmul_act_bwd(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& grad_pre, const Tensor& grad_bias,
                    const Tensor& saved, Activation act) {
  if (d.n == 0) return;
  DeviceScope scope(grad_pre.device());
  check_cublas_dims(d, "matmul_act_bwd");
  if (d.m > 0 && d.k > 0 && lt_backward(d, a, b, grad_pre, grad_bias, saved, act)) return;
  // The product, then bias_act_bwd over it in place (each element is loaded before it is overwritten).
  product_or_zeros(d, a, b, grad_pre);
  bias_act_bwd(grad_pre, grad_bias, grad_pre, saved, d.m, d.n, act);
}

void gemm_bgrad(const GemmDesc& d, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& grad_bias) {
  VOLT_ASSERT(d.trans_a && d.lda == d.m && grad_bias.defined(),
              "gemm_bgrad: A must be the (k, m) output gradient, contiguous, and grad_bias defined");
  if (d.m == 0) return;
  DeviceScope scope(c.device());
  check_cublas_dims(d, "gemm_bgrad");
  if (d.n > 0 && d.k > 0 && lt_bgrad(d, a, b, c, grad_bias)) return;
  // The product, then the column sums of the (k, m) output gradient (bias_act_bwd without an activation).
  product_or_zeros(d, a, b, c);
  bias_act_bwd(Tensor(), grad_bias, a, Tensor(), d.k, d.m, Activation::None);
}

}  // namespace volt::cuda
