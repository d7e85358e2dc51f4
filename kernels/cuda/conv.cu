// cuDNN convolution (forward, backward data, backward filter). A convolution's plan (descriptors, the algorithm
// cuDNN's heuristics pick and its workspace size) is made once per configuration and kept in a PlanCache: the
// heuristics cost milliseconds of host time per call, which dominated a small CNN's step. Workspaces come from
// Volt's caching allocator so they are reused between steps.
#include <memory>

#include <volt/kernels/backend/conv.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/cuda/cudnn_util.cuh>
#include <volt/kernels/common/plan_cache.h>
#include <volt/kernels/ops.h>

namespace volt::cuda {

namespace {

using cudnn::cudnn_type;
using cudnn::handle_for;
using cudnn::Scalars;
using cudnn::TensorDesc;

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

}  // namespace volt::cuda
