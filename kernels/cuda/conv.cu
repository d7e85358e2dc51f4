// cuDNN convolution (forward, backward data, backward filter). A convolution's plan (descriptors, the algorithm
// and its workspace size) is made once per configuration and kept in a PlanCache: choosing costs milliseconds of
// host time per call, which dominated a small CNN's step. The algorithm is the heuristics' first choice, or with
// set_cudnn_benchmark(true) the fastest of timed trials (kernels/cudnn_benchmark.h); the mode is part of the key
// (kernels/common/conv_plan_key.h). Workspaces come from Volt's caching allocator so they are reused between
// steps. The bias is added by Volt's own kernel for every dtype (the legacy cudnnAddTensor is not documented for
// bf16), as the op adds its gradient with Volt's own sum; an empty batch never reaches cuDNN, whose descriptors
// reject zero sizes.
#include <algorithm>
#include <memory>
#include <tuple>
#include <utility>

#include <volt/kernels/backend/conv.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/backend/scratch.h>
#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/cuda/cudnn_util.cuh>
#include <volt/kernels/cuda/loops.cuh>
#include <volt/kernels/common/conv_plan_key.h>
#include <volt/kernels/common/plan_cache.h>
#include <volt/kernels/cudnn_benchmark.h>
#include <volt/kernels/ops.h>  // allow_tf32() only: the setting read when a plan is made (not for scratch)

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
  bool tf32 = false;  // f32 may use TF32 tensor cores (set_allow_tf32 when the plan was made)
  ConvDesc(const Conv2dParams& p, DType t, bool allow_tf32_math) : tf32(allow_tf32_math) {
    VOLT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
    const cudnnDataType_t compute = t == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    VOLT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d, static_cast<int>(p.pad_h), static_cast<int>(p.pad_w),
                                                     static_cast<int>(p.stride_h), static_cast<int>(p.stride_w),
                                                     static_cast<int>(p.dil_h), static_cast<int>(p.dil_w),
                                                     CUDNN_CROSS_CORRELATION, compute));
    // Tensor cores for half types; f32 uses TF32 only when set_allow_tf32(true), like matmul.
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    if (t == DType::f16 || t == DType::bf16) math = CUDNN_TENSOR_OP_MATH;
    else if (t == DType::f32 && !tf32) math = CUDNN_FMA_MATH;
    VOLT_CUDNN_CHECK(cudnnSetConvolutionMathType(d, math));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// The heuristics' choice must not need more workspace than this when a lower-ranked algorithm needs less: the
// first-ranked one can ask for gigabytes, and failing to allocate it would fail the convolution.
constexpr size_t kHeuristicWorkspaceCap = size_t{256} << 20;

// The first algorithm cuDNN's heuristics rank as working whose workspace fits kHeuristicWorkspaceCap (else the
// working one that needs the least). PerfT is one of the cudnnConvolution*AlgoPerf_t.
template <class PerfT, class GetFn>
PerfT pick_algo(GetFn get) {
  constexpr int kMax = 16;
  PerfT perf[kMax];
  int returned = 0;
  VOLT_CUDNN_CHECK(get(kMax, &returned, perf));
  const PerfT* smallest = nullptr;
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (perf[i].memory <= kHeuristicWorkspaceCap) return perf[i];
    if (!smallest || perf[i].memory < smallest->memory) smallest = &perf[i];
  }
  VOLT_CHECK(smallest != nullptr, "cuDNN: no convolution algorithm supports this configuration (", returned,
             " ranked by the heuristics)");
  return *smallest;
}

using ConvKind = ConvPlanKind;

ConvKey conv_key(ConvKind kind, const Tensor& x, const Tensor& w, const Conv2dParams& p, ConvPlanMode mode) {
  return conv_plan_key(kind, x.device().index, static_cast<int64_t>(x.dtype()), mode,
                       {x.size(0), x.size(1), x.size(2), x.size(3)}, {w.size(0), w.size(1), w.size(2), w.size(3)},
                       {p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dil_h, p.dil_w});
}

struct ConvPlan {
  TensorDesc x, y;  // y: the output (forward) or the output's gradient (backward)
  FilterDesc w;
  ConvDesc conv;
  int algo = 0;     // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t, per the plan's kind
  size_t workspace = 0;
  ConvPlan(const Tensor& xt, const Tensor& yt, const Tensor& wt, const Conv2dParams& p, bool tf32)
      : x(xt), y(yt), w(wt), conv(p, xt.dtype(), tf32) {}
};

using ConvPlanCache = PlanCache<ConvKey, ConvPlan, ConvKeyHash>;

ConvPlanCache& conv_plans() {
  static ConvPlanCache cache(512);
  return cache;
}

// Benchmark mode's trial workspace: at most this much, less when the candidates need less.
constexpr size_t kBenchmarkWorkspaceCap = size_t{256} << 20;

// The largest workspace any algorithm of this kind reports for the plan, capped (algorithms that do not
// support the configuration report an error and are skipped).
size_t benchmark_workspace_bytes(ConvKind kind, cudnnHandle_t h, const ConvPlan& plan) {
  size_t most = 0;
  const int count = kind == ConvKind::Forward        ? static_cast<int>(CUDNN_CONVOLUTION_FWD_ALGO_COUNT)
                    : kind == ConvKind::BackwardData ? static_cast<int>(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT)
                                                     : static_cast<int>(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
  for (int a = 0; a < count; ++a) {
    size_t bytes = 0;
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    if (kind == ConvKind::Forward)
      st = cudnnGetConvolutionForwardWorkspaceSize(h, plan.x.d, plan.w.d, plan.conv.d, plan.y.d,
                                                   static_cast<cudnnConvolutionFwdAlgo_t>(a), &bytes);
    else if (kind == ConvKind::BackwardData)
      st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, plan.w.d, plan.y.d, plan.conv.d, plan.x.d,
                                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(a), &bytes);
    else
      st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, plan.x.d, plan.y.d, plan.conv.d, plan.w.d,
                                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(a), &bytes);
    if (st == CUDNN_STATUS_SUCCESS) most = std::max(most, bytes);
  }
  return std::min(most, kBenchmarkWorkspaceCap);
}

// A trial workspace from Volt's allocator: `bytes`, halved while the allocation fails (the trials then skip
// the algorithms that need more). Returns the buffer and its usable size.
std::pair<Tensor, size_t> benchmark_workspace(const Device& device, size_t bytes) {
  for (;;) {
    try {
      return {backend::scratch_bytes(bytes, device), bytes};
    } catch (const Error&) {
      if (bytes == 0) throw;
      bytes /= 2;
    }
  }
}

// The fastest trial that ran (cuDNN sorts the results by time). With f32 and TF32 off the descriptor asks
// for FMA math; a result in another math mode is not taken.
template <class PerfT>
PerfT fastest_trial(const PerfT* perf, int returned, bool fma_only) {
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (fma_only && perf[i].mathType != CUDNN_FMA_MATH) continue;
    return perf[i];
  }
  VOLT_FAIL("cuDNN benchmark: no convolution algorithm ran for this configuration (", returned,
            " tried); set_cudnn_benchmark(false) uses the heuristics' choice instead");
}

// Runs one cudnnFind*AlgorithmEx (`find(n, &returned, perf)`, at most N results) and returns the fastest trial's
// algorithm and math mode. PerfT is one of the cudnnConvolution*AlgoPerf_t, as in pick_algo.
template <class PerfT, int N, class FindFn>
std::pair<int, cudnnMathType_t> run_trials(bool fma_only, FindFn find) {
  PerfT perf[N];
  int returned = 0;
  VOLT_CUDNN_CHECK(find(N, &returned, perf));
  const PerfT best = fastest_trial(perf, returned, fma_only);
  return {static_cast<int>(best.algo), best.mathType};
}

// Benchmark mode: times the algorithms on the call's tensors (cudnnFind*AlgorithmEx) and records the fastest
// and its math mode in the plan. `out` is the tensor the pass writes (y, dx or dw); the trials overwrite it
// before the real call does.
void choose_by_trials(ConvKind kind, cudnnHandle_t h, ConvPlan& plan, const Tensor& x, const Tensor& y,
                      const Tensor& w, const Tensor& out) {
  const bool fma_only = x.dtype() == DType::f32 && !plan.conv.tf32;
  auto [ws, ws_bytes] = benchmark_workspace(x.device(), benchmark_workspace_bytes(kind, h, plan));
  void* wsp = ws.data_ptr();
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  switch (kind) {
    case ConvKind::Forward:
      std::tie(plan.algo, math) = run_trials<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
          fma_only, [&](int n, int* r, cudnnConvolutionFwdAlgoPerf_t* pf) {
            return cudnnFindConvolutionForwardAlgorithmEx(h, plan.x.d, x.data_ptr(), plan.w.d, w.data_ptr(),
                                                          plan.conv.d, plan.y.d, out.data_ptr(), n, r, pf, wsp,
                                                          ws_bytes);
          });
      break;
    case ConvKind::BackwardData:
      std::tie(plan.algo, math) =
          run_trials<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
              fma_only, [&](int n, int* r, cudnnConvolutionBwdDataAlgoPerf_t* pf) {
                return cudnnFindConvolutionBackwardDataAlgorithmEx(h, plan.w.d, w.data_ptr(), plan.y.d,
                                                                   y.data_ptr(), plan.conv.d, plan.x.d,
                                                                   out.data_ptr(), n, r, pf, wsp, ws_bytes);
              });
      break;
    case ConvKind::BackwardFilter:
      std::tie(plan.algo, math) =
          run_trials<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
              fma_only, [&](int n, int* r, cudnnConvolutionBwdFilterAlgoPerf_t* pf) {
                return cudnnFindConvolutionBackwardFilterAlgorithmEx(h, plan.x.d, x.data_ptr(), plan.y.d,
                                                                     y.data_ptr(), plan.conv.d, plan.w.d,
                                                                     out.data_ptr(), n, r, pf, wsp, ws_bytes);
              });
      break;
  }
  // The algorithm was timed in this math mode; cuDNN needs both to run the same kernel.
  VOLT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv.d, math));
}

// Default mode: the first algorithm cuDNN's heuristics rank as working (no trial runs; see pick_algo), run in
// the math mode the heuristics ranked it in; f32 with TF32 off keeps the descriptor's FMA math.
void choose_by_heuristics(ConvKind kind, cudnnHandle_t h, ConvPlan& plan, bool fma_only) {
  cudnnMathType_t math = CUDNN_FMA_MATH;
  auto take = [&](const auto& perf) {
    plan.algo = static_cast<int>(perf.algo);
    if (!fma_only) math = perf.mathType;
  };
  switch (kind) {
    case ConvKind::Forward:
      take(pick_algo<cudnnConvolutionFwdAlgoPerf_t>([&](int n, int* r, cudnnConvolutionFwdAlgoPerf_t* pf) {
        return cudnnGetConvolutionForwardAlgorithm_v7(h, plan.x.d, plan.w.d, plan.conv.d, plan.y.d, n, r, pf);
      }));
      break;
    case ConvKind::BackwardData:
      take(pick_algo<cudnnConvolutionBwdDataAlgoPerf_t>(
          [&](int n, int* r, cudnnConvolutionBwdDataAlgoPerf_t* pf) {
            return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, plan.w.d, plan.y.d, plan.conv.d, plan.x.d, n, r,
                                                               pf);
          }));
      break;
    case ConvKind::BackwardFilter:
      take(pick_algo<cudnnConvolutionBwdFilterAlgoPerf_t>(
          [&](int n, int* r, cudnnConvolutionBwdFilterAlgoPerf_t* pf) {
            return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, plan.x.d, plan.y.d, plan.conv.d, plan.w.d, n, r,
                                                                 pf);
          }));
      break;
  }
  VOLT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv.d, math));
}

// x, y, w: the pass's input, output (or output gradient) and filter; `out`: what the pass writes (used as
// scratch by benchmark trials).
std::shared_ptr<const ConvPlan> conv_plan(ConvKind kind, cudnnHandle_t h, const Tensor& x, const Tensor& y,
                                          const Tensor& w, const Conv2dParams& p, const Tensor& out) {
  const ConvPlanMode mode{allow_tf32(), cudnn_benchmark()};
  return conv_plans().get_or_create(conv_key(kind, x, w, p, mode), [&] {
    // Benchmark trials time kernels with host synchronisations, which a CUDA graph capture cannot hold.
    VOLT_CHECK(!mode.benchmark || !cuda_graph::is_capturing(x.device()), "conv2d (CUDA): cuDNN benchmark mode has "
               "no algorithm yet for this convolution (input ", x.shape_str(), ", weight ", w.shape_str(),
               ") and cannot time one during a CUDA graph capture; run the step once eagerly before capturing it");
    auto plan = std::make_shared<ConvPlan>(x, y, w, p, mode.tf32);
    if (mode.benchmark) choose_by_trials(kind, h, *plan, x, y, w, out);
    else choose_by_heuristics(kind, h, *plan, x.dtype() == DType::f32 && !mode.tf32);
    switch (kind) {
      case ConvKind::Forward:
        VOLT_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
            h, plan->x.d, plan->w.d, plan->conv.d, plan->y.d, static_cast<cudnnConvolutionFwdAlgo_t>(plan->algo),
            &plan->workspace));
        break;
      case ConvKind::BackwardData:
        VOLT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
            h, plan->w.d, plan->y.d, plan->conv.d, plan->x.d, static_cast<cudnnConvolutionBwdDataAlgo_t>(plan->algo),
            &plan->workspace));
        break;
      case ConvKind::BackwardFilter:
        VOLT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
            h, plan->x.d, plan->y.d, plan->conv.d, plan->w.d,
            static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan->algo), &plan->workspace));
        break;
    }
    return std::shared_ptr<const ConvPlan>(std::move(plan));
  });
}

// out (N, C, H, W) += bias[c], in the accumulation type.
template <class T>
__global__ void add_channel_bias_kernel(T* out, const T* bias, int64_t total, int64_t channels, int64_t hw) {
  using A = acc_t<T>;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x)
    out[e] = T(A(out[e]) + A(bias[(e / hw) % channels]));
}

void zero_fill(const Tensor& t) {
  if (t.defined()) VOLT_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, t.nbytes(), launch_stream()));
}

void conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                    const Conv2dParams& p) {
  if (out.numel() == 0) return;
  DeviceScope scope(x.device());
  if (x.numel() == 0 || weight.numel() == 0) {  // no input channels: the output is the bias alone
    zero_fill(out);
  } else {
    cudnnHandle_t h = handle_for(x.device());
    auto plan = conv_plan(ConvKind::Forward, h, x, out, weight, p, out);
    Scalars s(x.dtype());
    Tensor ws = backend::scratch_bytes(plan->workspace, x.device());
    VOLT_CUDNN_CHECK(cudnnConvolutionForward(h, s.one(), plan->x.d, x.data_ptr(), plan->w.d, weight.data_ptr(),
                                             plan->conv.d, static_cast<cudnnConvolutionFwdAlgo_t>(plan->algo),
                                             ws.data_ptr(), plan->workspace, s.zero(), plan->y.d, out.data_ptr()));
  }
  if (bias.defined()) {
    const int64_t total = out.numel(), channels = out.size(1), hw = out.size(2) * out.size(3);
    dispatch_floating(out.dtype(), "conv2d bias", [&](auto tag) {
      using T = decltype(tag);
      add_channel_bias_kernel<T><<<blocks_for(total), 256, 0, launch_stream()>>>(
          static_cast<T*>(out.data_ptr()), static_cast<const T*>(bias.data_ptr()), total, channels, hw);
    });
    VOLT_CUDA_CHECK_LAUNCH();
  }
}

void conv2d_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
                     const Tensor& weight, const Conv2dParams& p) {
  DeviceScope scope(x.device());
  if (x.numel() == 0 || grad_out.numel() == 0 || weight.numel() == 0) {  // an empty sum: zero gradients
    zero_fill(grad_x);
    zero_fill(grad_weight);
    return;
  }
  cudnnHandle_t h = handle_for(x.device());
  Scalars s(x.dtype());
  if (grad_x.defined()) {
    auto plan = conv_plan(ConvKind::BackwardData, h, x, grad_out, weight, p, grad_x);
    Tensor ws = backend::scratch_bytes(plan->workspace, x.device());
    VOLT_CUDNN_CHECK(cudnnConvolutionBackwardData(h, s.one(), plan->w.d, weight.data_ptr(), plan->y.d,
                                                  grad_out.data_ptr(), plan->conv.d,
                                                  static_cast<cudnnConvolutionBwdDataAlgo_t>(plan->algo), ws.data_ptr(),
                                                  plan->workspace, s.zero(), plan->x.d, grad_x.data_ptr()));
  }
  if (grad_weight.defined()) {
    auto plan = conv_plan(ConvKind::BackwardFilter, h, x, grad_out, weight, p, grad_weight);
    Tensor ws = backend::scratch_bytes(plan->workspace, x.device());
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
