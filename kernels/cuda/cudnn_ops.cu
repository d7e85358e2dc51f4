// cuDNN convolution (forward, backward data, backward filter), pooling and batch norm. A convolution's plan
// (descriptors, the algorithm cuDNN's heuristics pick and its workspace size) is made once per configuration
// and kept in a PlanCache: the heuristics cost milliseconds of host time per call, which dominated a small
// CNN's step. Pooling and batch-norm descriptors are built per call (cheap) and freed by RAII wrappers;
// workspaces come from Volt's caching allocator so they are reused between steps. Half types compute in f32
// (cuDNN's rule for HALF/BFLOAT16 data).
#include <cudnn.h>

#include <mutex>
#include <vector>

#include <volt/kernels/backend/batch_norm.h>
#include <volt/kernels/backend/conv.h>
#include <volt/kernels/backend/elementwise.h>
#include <volt/kernels/backend/pool.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/plan_cache.h>
#include <volt/kernels/cuda/cublas_check.h>
#include <volt/kernels/ops.h>
#include <volt/runtime/cuda_api.h>

// The batch-norm entry points are deprecated in cuDNN 9 in favour of the graph API but remain supported.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace volt::cuda {

namespace {

cudnnHandle_t handle_for(const Device& device) {
  static std::mutex mu;
  static std::vector<cudnnHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  if (handles.size() <= static_cast<size_t>(device.index)) handles.resize(device.index + 1, nullptr);
  cudnnHandle_t& h = handles[device.index];
  if (!h) VOLT_CUDNN_CHECK(cudnnCreate(&h));
  VOLT_CUDNN_CHECK(cudnnSetStream(h, static_cast<cudaStream_t>(get_stream(device, StreamKind::Compute).handle)));
  return h;
}

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: VOLT_FAIL("cuDNN: dtype ", dtype_name(t), " is not supported; expected a floating dtype");
  }
}

// Scaling factors: double for double data, float otherwise.
struct Scalars {
  float f1 = 1.f, f0 = 0.f;
  double d1 = 1.0, d0 = 0.0;
  bool dbl;
  explicit Scalars(DType t) : dbl(t == DType::f64) {}
  const void* one() const { return dbl ? static_cast<const void*>(&d1) : &f1; }
  const void* zero() const { return dbl ? static_cast<const void*>(&d0) : &f0; }
};

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(DType t, int64_t n, int64_t c, int64_t h, int64_t w) {
    VOLT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
    VOLT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, cudnn_type(t), static_cast<int>(n),
                                                static_cast<int>(c), static_cast<int>(h), static_cast<int>(w)));
  }
  explicit TensorDesc(const Tensor& t)  // (N, C, H, W), or (N, C, S...) flattened to (N, C, S, 1)
      : TensorDesc(t.dtype(), t.size(0), t.size(1), t.dim() == 4 ? t.size(2) : t.numel() / std::max<int64_t>(t.size(0) * t.size(1), 1),
                   t.dim() == 4 ? t.size(3) : 1) {}
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  explicit FilterDesc(const Tensor& w) {
    VOLT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d));
    VOLT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d, cudnn_type(w.dtype()), CUDNN_TENSOR_NCHW, static_cast<int>(w.size(0)),
                                                static_cast<int>(w.size(1)), static_cast<int>(w.size(2)),
                                                static_cast<int>(w.size(3))));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(const Conv2dParams& p, DType t) {
    VOLT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
    const cudnnDataType_t compute = t == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    VOLT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d, static_cast<int>(p.pad_h), static_cast<int>(p.pad_w),
                                                     static_cast<int>(p.stride_h), static_cast<int>(p.stride_w),
                                                     static_cast<int>(p.dil_h), static_cast<int>(p.dil_w),
                                                     CUDNN_CROSS_CORRELATION, compute));
    // Tensor cores for half types; f32 uses TF32 only when set_allow_tf32(true), like matmul.
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    if (t == DType::f16 || t == DType::bf16) math = CUDNN_TENSOR_OP_MATH;
    else if (t == DType::f32 && !allow_tf32()) math = CUDNN_FMA_MATH;
    VOLT_CUDNN_CHECK(cudnnSetConvolutionMathType(d, math));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

struct PoolDesc {
  cudnnPoolingDescriptor_t d = nullptr;
  PoolDesc(cudnnPoolingMode_t mode, const Pool2dParams& p) {
    VOLT_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&d));
    VOLT_CUDNN_CHECK(cudnnSetPooling2dDescriptor(d, mode, CUDNN_PROPAGATE_NAN, static_cast<int>(p.kernel_h),
                                                 static_cast<int>(p.kernel_w), static_cast<int>(p.pad_h),
                                                 static_cast<int>(p.pad_w), static_cast<int>(p.stride_h),
                                                 static_cast<int>(p.stride_w)));
  }
  ~PoolDesc() { cudnnDestroyPoolingDescriptor(d); }
  PoolDesc(const PoolDesc&) = delete;
  PoolDesc& operator=(const PoolDesc&) = delete;
};

// A device scratch buffer from the caching allocator (kept alive until the call's work is enqueued; the
// allocator's stream ordering makes reuse by later work on the compute stream safe).
Tensor workspace(const Device& device, size_t bytes) {
  return empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, DType::u8, device);
}

// The first algorithm cuDNN's heuristics rank as working. PerfT is one of the cudnnConvolution*AlgoPerf_t.
template <class PerfT, class GetFn>
PerfT pick_algo(GetFn get) {
  constexpr int kMax = 8;
  PerfT perf[kMax];
  int returned = 0;
  VOLT_CUDNN_CHECK(get(kMax, &returned, perf));
  for (int i = 0; i < returned; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS) return perf[i];
  VOLT_FAIL("cuDNN: no convolution algorithm supports this configuration");
}

}  // namespace

// ---- convolution --------------------------------------------------------------------------------------------

namespace {

enum class ConvKind : int64_t { Forward = 0, BackwardData = 1, BackwardFilter = 2 };

// Everything a plan depends on: the pass, device, dtype, math mode (TF32), shapes and parameters.
using ConvKey = PlanKey<18>;

ConvKey conv_key(ConvKind kind, const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  return ConvKey{{static_cast<int64_t>(kind), x.device().index, static_cast<int64_t>(x.dtype()),
                  allow_tf32() ? 1 : 0, x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(1), w.size(2),
                  w.size(3), p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dil_h, p.dil_w}};
}

struct ConvPlan {
  TensorDesc x, y;  // y: the output (forward) or the output's gradient (backward)
  FilterDesc w;
  ConvDesc conv;
  TensorDesc bias;  // (1, OC, 1, 1)
  int algo = 0;     // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t, per the plan's kind
  size_t workspace = 0;
  ConvPlan(const Tensor& xt, const Tensor& yt, const Tensor& wt, const Conv2dParams& p)
      : x(xt), y(yt), w(wt), conv(p, xt.dtype()), bias(xt.dtype(), 1, wt.size(0), 1, 1) {}
};

using ConvPlanCache = PlanCache<ConvKey, ConvPlan, PlanKeyHash<18>>;

ConvPlanCache& conv_plans() {
  static ConvPlanCache cache(512);
  return cache;
}

std::shared_ptr<const ConvPlan> conv_plan(ConvKind kind, cudnnHandle_t h, const Tensor& x, const Tensor& y,
                                          const Tensor& w, const Conv2dParams& p) {
  return conv_plans().get_or_create(conv_key(kind, x, w, p), [&] {
    auto plan = std::make_shared<ConvPlan>(x, y, w, p);
    switch (kind) {
      case ConvKind::Forward: {
        auto perf = pick_algo<cudnnConvolutionFwdAlgoPerf_t>([&](int n, int* r, cudnnConvolutionFwdAlgoPerf_t* pf) {
          return cudnnGetConvolutionForwardAlgorithm_v7(h, plan->x.d, plan->w.d, plan->conv.d, plan->y.d, n, r, pf);
        });
        plan->algo = static_cast<int>(perf.algo);
        VOLT_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, plan->x.d, plan->w.d, plan->conv.d, plan->y.d,
                                                                 perf.algo, &plan->workspace));
        break;
      }
      case ConvKind::BackwardData: {
        auto perf = pick_algo<cudnnConvolutionBwdDataAlgoPerf_t>(
            [&](int n, int* r, cudnnConvolutionBwdDataAlgoPerf_t* pf) {
              return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, plan->w.d, plan->y.d, plan->conv.d, plan->x.d, n,
                                                                 r, pf);
            });
        plan->algo = static_cast<int>(perf.algo);
        VOLT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(h, plan->w.d, plan->y.d, plan->conv.d,
                                                                      plan->x.d, perf.algo, &plan->workspace));
        break;
      }
      case ConvKind::BackwardFilter: {
        auto perf = pick_algo<cudnnConvolutionBwdFilterAlgoPerf_t>(
            [&](int n, int* r, cudnnConvolutionBwdFilterAlgoPerf_t* pf) {
              return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, plan->x.d, plan->y.d, plan->conv.d, plan->w.d,
                                                                   n, r, pf);
            });
        plan->algo = static_cast<int>(perf.algo);
        VOLT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, plan->x.d, plan->y.d, plan->conv.d,
                                                                        plan->w.d, perf.algo, &plan->workspace));
        break;
      }
    }
    return std::shared_ptr<const ConvPlan>(std::move(plan));
  });
}


void conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                    const Conv2dParams& p) {
  DeviceScope scope(x.device());
  cudnnHandle_t h = handle_for(x.device());
  auto plan = conv_plan(ConvKind::Forward, h, x, out, weight, p);
  Scalars s(x.dtype());
  Tensor ws = workspace(x.device(), plan->workspace);
  VOLT_CUDNN_CHECK(cudnnConvolutionForward(h, s.one(), plan->x.d, x.data_ptr(), plan->w.d, weight.data_ptr(),
                                           plan->conv.d, static_cast<cudnnConvolutionFwdAlgo_t>(plan->algo),
                                           ws.data_ptr(), plan->workspace, s.zero(), plan->y.d, out.data_ptr()));
  if (bias.defined()) {
    VOLT_CUDNN_CHECK(cudnnAddTensor(h, s.one(), plan->bias.d, bias.data_ptr(), s.one(), plan->y.d, out.data_ptr()));
  }
}

void conv2d_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
                     const Tensor& weight, const Conv2dParams& p) {
  DeviceScope scope(x.device());
  cudnnHandle_t h = handle_for(x.device());
  Scalars s(x.dtype());
  if (grad_x.defined()) {
    auto plan = conv_plan(ConvKind::BackwardData, h, x, grad_out, weight, p);
    Tensor ws = workspace(x.device(), plan->workspace);
    VOLT_CUDNN_CHECK(cudnnConvolutionBackwardData(h, s.one(), plan->w.d, weight.data_ptr(), plan->y.d,
                                                  grad_out.data_ptr(), plan->conv.d,
                                                  static_cast<cudnnConvolutionBwdDataAlgo_t>(plan->algo), ws.data_ptr(),
                                                  plan->workspace, s.zero(), plan->x.d, grad_x.data_ptr()));
  }
  if (grad_weight.defined()) {
    auto plan = conv_plan(ConvKind::BackwardFilter, h, x, grad_out, weight, p);
    Tensor ws = workspace(x.device(), plan->workspace);
    VOLT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, s.one(), plan->x.d, x.data_ptr(), plan->y.d, grad_out.data_ptr(),
                                                    plan->conv.d,
                                                    static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan->algo),
                                                    ws.data_ptr(), plan->workspace, s.zero(), plan->w.d,
                                                    grad_weight.data_ptr()));
  }
}

}  // namespace

constexpr backend::ConvKernels conv_kernels{
    .conv2d_forward = {conv2d_forward, backend::kFloating},
    .conv2d_backward = {conv2d_backward, backend::kFloating},
};

// ---- pooling ------------------------------------------------------------------------------------------------

namespace {
void pool_forward(cudnnPoolingMode_t mode, const Tensor& out, const Tensor& x, const Pool2dParams& p) {
  DeviceScope scope(x.device());
  cudnnHandle_t h = handle_for(x.device());
  TensorDesc xd(x), yd(out);
  PoolDesc pd(mode, p);
  Scalars s(x.dtype());
  VOLT_CUDNN_CHECK(cudnnPoolingForward(h, pd.d, s.one(), xd.d, x.data_ptr(), s.zero(), yd.d, out.data_ptr()));
}

void pool_backward(cudnnPoolingMode_t mode, const Tensor& grad_x, const Tensor& grad_out, const Tensor& x,
                   const Tensor& out, const Pool2dParams& p) {
  DeviceScope scope(x.device());
  cudnnHandle_t h = handle_for(x.device());
  TensorDesc xd(x), yd(out);
  PoolDesc pd(mode, p);
  Scalars s(x.dtype());
  VOLT_CUDNN_CHECK(cudnnPoolingBackward(h, pd.d, s.one(), yd.d, out.data_ptr(), yd.d, grad_out.data_ptr(), xd.d,
                                        x.data_ptr(), s.zero(), xd.d, grad_x.data_ptr()));
}

void max_pool2d_forward(const Tensor& out, const Tensor&, const Tensor& x, const Pool2dParams& p) {
  // The deterministic mode routes each gradient to one argmax (the first), like the CPU path.
  pool_forward(CUDNN_POOLING_MAX_DETERMINISTIC, out, x, p);
}
void max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& x, const Tensor& out,
                         const Tensor&, const Pool2dParams& p) {
  pool_backward(CUDNN_POOLING_MAX_DETERMINISTIC, grad_x, grad_out, x, out, p);
}
void avg_pool2d_forward(const Tensor& out, const Tensor& x, const Pool2dParams& p) {
  pool_forward(CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, out, x, p);
}
void avg_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& x, const Tensor& out,
                         const Pool2dParams& p) {
  pool_backward(CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, grad_x, grad_out, x, out, p);
}

}  // namespace

constexpr backend::PoolKernels pool_kernels{
    .max_pool2d_forward = {max_pool2d_forward, backend::kFloating},
    .max_pool2d_backward = {max_pool2d_backward, backend::kFloating},
    .avg_pool2d_forward = {avg_pool2d_forward, backend::kFloating},
    .avg_pool2d_backward = {avg_pool2d_backward, backend::kFloating},
};

// ---- batch norm ---------------------------------------------------------------------------------------------
// (N, C) and (N, C, S) inputs run as (N, C, S, 1) in SPATIAL mode: statistics per channel over N and S.
// cuDNN updates the running variance with the unbiased batch variance, as Volt's contract requires.

namespace {
struct BnDescs {
  TensorDesc x;
  cudnnTensorDescriptor_t bn = nullptr;
  explicit BnDescs(const Tensor& t) : x(t) {
    VOLT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bn));
    VOLT_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(bn, x.d, CUDNN_BATCHNORM_SPATIAL));
  }
  ~BnDescs() { cudnnDestroyTensorDescriptor(bn); }
};

double bn_eps(double eps) {
  VOLT_CHECK(eps >= CUDNN_BN_MIN_EPSILON, "batch_norm (CUDA): eps ", eps, " is below cuDNN's minimum ",
             CUDNN_BN_MIN_EPSILON);
  return eps;
}

void batch_norm_forward_train(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                              const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const Tensor& running_mean, const Tensor& running_var, double momentum, double eps) {
  DeviceScope scope(x.device());
  cudnnHandle_t h = handle_for(x.device());
  BnDescs d(x);
  Scalars s(x.dtype());
  // cuDNN takes both running statistics or neither.
  Tensor rm = running_mean, rv = running_var;
  if (rm.defined() != rv.defined()) {
    // Backend-level allocation and fills (empty() is the runtime's; no call up into the ops layer).
    if (!rm.defined()) {
      rm = empty(rv.shape(), rv.dtype(), rv.device());
      memset_zero(rm.data_ptr(), rm.device(), rm.nbytes());
    }
    if (!rv.defined()) {
      rv = empty(rm.shape(), rm.dtype(), rm.device());
      memset_zero(rv.data_ptr(), rv.device(), rv.nbytes());  // Fill reads its input: keep initcheck quiet
      ElemParams one;
      one.a = 1.0;
      elementwise_kernels.unary.fn(UnaryOp::Fill, rv, rv, one);
    }
  }
  VOLT_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      h, CUDNN_BATCHNORM_SPATIAL, s.one(), s.zero(), d.x.d, x.data_ptr(), d.x.d, out.data_ptr(), d.bn,
      weight.data_ptr(), bias.data_ptr(), momentum, rm.defined() ? rm.data_ptr() : nullptr,
      rv.defined() ? rv.data_ptr() : nullptr, bn_eps(eps), save_mean.data_ptr(), save_invstd.data_ptr()));
}

void batch_norm_forward_eval(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                             const Tensor& running_mean, const Tensor& running_var, double eps) {
  DeviceScope scope(x.device());
  cudnnHandle_t h = handle_for(x.device());
  BnDescs d(x);
  Scalars s(x.dtype());
  VOLT_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
      h, CUDNN_BATCHNORM_SPATIAL, s.one(), s.zero(), d.x.d, x.data_ptr(), d.x.d, out.data_ptr(), d.bn,
      weight.data_ptr(), bias.data_ptr(), running_mean.data_ptr(), running_var.data_ptr(), bn_eps(eps)));
}

void batch_norm_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                         const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                         const Tensor& save_invstd, double eps) {
  DeviceScope scope(x.device());
  cudnnHandle_t h = handle_for(x.device());
  BnDescs d(x);
  Scalars s(x.dtype());
  // cuDNN writes all three gradients: scratch tensors stand in for the ones nobody asked for.
  Tensor dx = grad_x.defined() ? grad_x : empty(x.shape(), x.dtype(), x.device());
  Tensor dw = grad_weight.defined() ? grad_weight : empty(weight.shape(), weight.dtype(), weight.device());
  Tensor db = grad_bias.defined() ? grad_bias : empty(weight.shape(), weight.dtype(), weight.device());
  VOLT_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      h, CUDNN_BATCHNORM_SPATIAL, s.one(), s.zero(), s.one(), s.zero(), d.x.d, x.data_ptr(), d.x.d,
      grad_out.data_ptr(), d.x.d, dx.data_ptr(), d.bn, weight.data_ptr(), dw.data_ptr(), db.data_ptr(), bn_eps(eps),
      save_mean.data_ptr(), save_invstd.data_ptr()));
}

}  // namespace

constexpr backend::BatchNormKernels batch_norm_kernels{
    .batch_norm_forward_train = {batch_norm_forward_train, backend::kFloating},
    .batch_norm_forward_eval = {batch_norm_forward_eval, backend::kFloating},
    .batch_norm_backward = {batch_norm_backward, backend::kFloating},
};

}  // namespace volt::cuda
