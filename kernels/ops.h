#pragma once
/// @file
/// Volt's differentiable tensor operations. Every op checks its arguments (shapes, dtypes, devices) and throws
/// volt::Error naming the op, the argument and what was expected; it runs on the device of its inputs (which
/// must all be on one device) and records autograd history when an input requires grad.
///
/// Broadcasting follows NumPy: shapes align from the right; a dim of size 1 stretches.
/// Mixed dtypes promote (promote_types); scalars keep the tensor's dtype (integer tensors with a fractional
/// scalar become float32).
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <volt/kernels/activation.h>
#include <volt/kernels/optim_hyper.h>
#include <volt/kernels/autograd.h>
#include <volt/runtime/generator.h>
#include <volt/kernels/tensor.h>

namespace volt {

// ---- factories (kernels/ops/factory_ops.cpp) -------------------------------------------------------------
Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = kCPU);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor empty_like(const Tensor& t);
/// [start, end) in steps of `step`; dtype i64 unless given.
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::i64, Device device = kCPU);
Tensor arange(int64_t end, DType dtype = DType::i64, Device device = kCPU);
/// Uniform [lo, hi) and standard normal numbers from the Philox generator (the global one by default).
Tensor rand(const Shape& shape, DType dtype = DType::f32, Device device = kCPU, Generator* gen = nullptr,
            double lo = 0.0, double hi = 1.0);
Tensor randn(const Shape& shape, DType dtype = DType::f32, Device device = kCPU, Generator* gen = nullptr,
             double mean = 0.0, double std = 1.0);
/// The numbers rand() would produce for (seed, counter offset): the reproducibility contract.
Tensor rand_with_seed(const Shape& shape, uint64_t seed, uint64_t offset, DType dtype = DType::f32,
                      Device device = kCPU);
Tensor randn_with_seed(const Shape& shape, uint64_t seed, uint64_t offset, DType dtype = DType::f32,
                       Device device = kCPU);

// ---- elementwise (kernels/ops/elementwise_ops.cpp) -------------------------------------------------------
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
/// Sums `grad` down to `shape` (the inverse of broadcasting); used by backward formulas.
Tensor sum_to(const Tensor& grad, const Shape& shape);

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor sub(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor div(const Tensor& a, double s);
Tensor rsub(const Tensor& a, double s);  ///< s - a
Tensor rdiv(const Tensor& a, double s);  ///< s / a
Tensor pow(const Tensor& a, double exponent);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor square(const Tensor& a);
Tensor sign(const Tensor& a);  ///< not differentiable (zero gradient)
Tensor relu(const Tensor& a);
Tensor leaky_relu(const Tensor& a, double negative_slope = 0.01);
Tensor sigmoid(const Tensor& a);
Tensor tanh(const Tensor& a);
/// GELU: x * Phi(x) exactly (erf), or PyTorch's approximate="tanh" form
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
enum class GeluApproximate { None, Tanh };
Tensor gelu(const Tensor& a, GeluApproximate approximate = GeluApproximate::None);
Tensor gelu(const Tensor& a, std::string_view approximate);  ///< "none" or "tanh"; anything else throws
GeluApproximate parse_gelu_approximate(std::string_view approximate);
Tensor silu(const Tensor& a);  ///< x * sigmoid(x) (also called swish)
Tensor clamp(const Tensor& a, std::optional<double> lo, std::optional<double> hi);
/// Comparisons return bool tensors and are not differentiable.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double s);
Tensor ne(const Tensor& a, double s);
Tensor lt(const Tensor& a, double s);
Tensor le(const Tensor& a, double s);
Tensor gt(const Tensor& a, double s);
Tensor ge(const Tensor& a, double s);
/// cond (bool) ? a : b, broadcasting all three; differentiable in a and b.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
/// Cast (not differentiable through integer types; differentiable between floating types).
Tensor cast(const Tensor& a, DType dtype);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double s);
Tensor operator-(const Tensor& a, double s);
Tensor operator*(const Tensor& a, double s);
Tensor operator/(const Tensor& a, double s);
Tensor operator+(double s, const Tensor& a);
Tensor operator-(double s, const Tensor& a);
Tensor operator*(double s, const Tensor& a);
Tensor operator/(double s, const Tensor& a);

/// In-place updates (for optimizers and metric states). They refuse tensors that require grad while grad mode
/// is on (they would corrupt the graph).
Tensor& add_(Tensor& a, const Tensor& b, double alpha = 1.0);  ///< a += alpha * b
Tensor& mul_(Tensor& a, double s);
Tensor& mul_(Tensor& a, const Tensor& b);

// ---- reductions (kernels/ops/reduce_ops.cpp) -------------------------------------------------------------
/// `dims` empty = all dims. Results keep reduced dims as size 1 when keepdim.
Tensor sum(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
/// Population (correction=0) or sample (correction=1, default) variance.
Tensor var(const Tensor& a, const std::vector<int64_t>& dims = {}, int64_t correction = 1, bool keepdim = false);
/// Max/min over one dim: values (differentiable, gradient to the first extremum) and i64 indices.
std::pair<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& a);  ///< over all elements
Tensor min(const Tensor& a);
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim = false);

// ---- linear algebra (kernels/ops/linalg_ops.cpp) ---------------------------------------------------------
/// matmul: 1-D x 1-D dot, 2-D x 2-D, and batched (..., n, k) x (..., k, m) with broadcast batch dims.
/// CPU: Eigen; CUDA: cuBLAS (TF32 allowed when set_allow_tf32(true)), small f32 products Volt's own kernel
/// (set_cuda_small_gemm).
Tensor matmul(const Tensor& a, const Tensor& b);
/// x (..., in) @ weight(out, in)^T + bias(out).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
/// act(x (..., in) @ weight(out, in)^T + bias(out)), bias optional (undefined: none), as one fused op: equal to
/// relu(linear(x, weight, bias)) (or gelu(..., approximate)) up to rounding, bit for bit on the CPU for ReLU and
/// f32/f64. CPU: the GEMM, then one activation pass; CUDA: one cuBLASLt matmul with a bias/activation epilogue
/// (f32/f16/bf16; exact GELU and f64 use cuBLAS plus one fused kernel; small f32 layers run on Volt's own kernel
/// with the bias and activation fused, see set_cuda_small_gemm). The backward computes the activation's and the
/// bias's gradients in one pass. Saves the output (ReLU) or the pre-activation (GELUs) for the backward.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act);
void set_allow_tf32(bool allow);
bool allow_tf32();
/// CUDA f32 products with a small output (at most 2^18 outputs and 2^25 multiply-adds, k <= 16384, unbatched,
/// TF32 off) run on Volt's own split-k kernel instead of cuBLAS (kernels/common/small_gemm.h): cuBLAS's large
/// tiles leave most of the GPU idle there. Deterministic on a given GPU model; on by default. Also covers
/// linear()'s forward (bias and activation fused). Switch it before a CUDA graph's eager warm-up steps, not
/// between them and the capture: a capture cannot create the cuBLAS handle that the first cuBLAS call needs.
void set_cuda_small_gemm(bool enable);
bool cuda_small_gemm();

// ---- nn ops (kernels/ops/nn_ops.cpp) ---------------------------------------------------------------------
Tensor softmax(const Tensor& a, int64_t dim);
Tensor log_softmax(const Tensor& a, int64_t dim);
enum class Reduction { Mean, Sum, None };
/// logits (N, C) or (N, C, d...) and class indices (N) / (N, d...) of dtype i64. Fused log-softmax + NLL.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                     int64_t ignore_index = -100, double label_smoothing = 0.0);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::Mean,
                int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
/// Zeroes elements with probability p and scales the rest by 1/(1-p); identity when !training or p == 0.
Tensor dropout(const Tensor& a, double p, bool training, Generator* gen = nullptr);

// ---- attention (kernels/ops/attention_ops.cpp) -----------------------------------------------------------
/// softmax(q k^T * scale + mask) v for q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev), the batch dims
/// (all but the last two) broadcasting as in matmul. q, k and v share one floating dtype and one device.
/// @code{.unparsed}
///   scale:     default 1 / sqrt(E).
///   attn_mask: optional, broadcastable to the scores (batch..., L, S). bool: true = query i may attend to key j
///              (note: nn::MultiheadAttention's masks follow PyTorch there, true = masked out); floating: added to
///              the scaled scores (-inf masks), and differentiable (e.g. a learned relative-position bias).
///   is_causal: query i attends to keys j <= i (top-left aligned, tril(ones(L, S))). May be combined with attn_mask
///              (both apply; PyTorch refuses the pair).
///   dropout_p: in [0, 1); drops attention weights (the rest scaled by 1/(1-p)) with `gen` (the global generator
///              by default). It applies whenever > 0: pass 0 outside training.
/// @endcode
/// A query with no key left (a fully masked row) gets all-zero weights and a zero output, not NaN.
/// The masked, scaled softmax is one fused kernel with a fused backward (the math in kernels/common/attention.h);
/// the two products are GEMMs. A call whose mask (if any) needs no gradient runs a chunk of query
/// rows at a time and keeps no (..., L, S) weights for the backward (set_sdpa_chunk_bytes, <volt/kernels/sdpa_path.h>);
/// on CUDA, cuDNN's fused SDPA takes the calls it can. Under autocast q, k and v run in the half dtype (the softmax
/// accumulates in fp32).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask = Tensor(),
                                    double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt, Generator* gen = nullptr);
/// The same, also returning the attention weights (batch..., L, S) that multiplied v (after dropout, as PyTorch's
/// nn.MultiheadAttention returns them): {output, weights}.
std::pair<Tensor, Tensor> scaled_dot_product_attention_with_weights(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask = Tensor(), double dropout_p = 0.0,
    bool is_causal = false, std::optional<double> scale = std::nullopt, Generator* gen = nullptr);

// ---- indexing and joining (kernels/ops/index_ops.cpp) ----------------------------------------------------
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);  ///< index: 1-D i64/i32
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index);        ///< index: same ndim as a, i64
/// (V, D) x (...) -> (..., D); indices i64 or i32, each in [0, V) (otherwise volt::Error naming the index and V).
/// padding_idx (in [-V, V); negative counts from the end, as in PyTorch): that row's gradient stays zero.
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx = std::nullopt);
Tensor one_hot(const Tensor& indices, int64_t num_classes);              ///< i64 (...,) -> i64 (..., C)

// ---- convolution, pooling, normalisation (kernels/ops/conv_ops.cpp) -------------------------------------
/// NCHW. CPU: im2col + Eigen GEMM; CUDA: cuDNN.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), std::pair<int64_t, int64_t> stride = {1, 1},
              std::pair<int64_t, int64_t> padding = {0, 0}, std::pair<int64_t, int64_t> dilation = {1, 1});
Tensor max_pool2d(const Tensor& x, std::pair<int64_t, int64_t> kernel, std::pair<int64_t, int64_t> stride = {0, 0},
                  std::pair<int64_t, int64_t> padding = {0, 0});  ///< stride {0,0} = kernel
Tensor avg_pool2d(const Tensor& x, std::pair<int64_t, int64_t> kernel, std::pair<int64_t, int64_t> stride = {0, 0},
                  std::pair<int64_t, int64_t> padding = {0, 0});
/// x (N, C) or (N, C, H, W). In training, normalises with batch statistics and updates running_mean/var
/// (when defined) in place with `momentum` (unbiased variance for the running estimate); in eval uses them.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean,
                  Tensor running_var, bool training, double momentum = 0.1, double eps = 1e-5);

// ---- layer and group normalisation (kernels/ops/norm_ops.cpp) -------------------------------------------
/// Statistics (mean and biased variance, Welford) accumulate in f32 (f64 for f64 x) and are saved for the
/// backward, which gives dx, dweight and dbias. weight and bias are optional (undefined: no affine transform) and
/// have x's dtype, or f32 for f16/bf16 x; gradients arrive in each one's own dtype. Under autocast f16/bf16 x runs
/// in fp32 (the output is f32), as batch_norm does. Output: x's shape and dtype.
///
/// layer_norm: x (..., *normalized_shape); each trailing block of prod(normalized_shape) values is normalised, then
/// y = xhat * weight + bias with weight and bias of shape normalized_shape.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
/// group_norm: x (N, C, *) with C divisible by num_groups; each sample's channels are split into num_groups
/// consecutive groups normalised together (over the group's channels and all spatial positions), then
/// y = xhat * weight[c] + bias[c] per channel, weight and bias of shape (C).
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);

// ---- mixed precision (kernels/ops/optim_ops.cpp) --------------------------------------------------------
/// GradScaler's unscale: every tensor in `grads` (floating, all on one device; undefined ones are skipped) is
/// multiplied by inv_scale in place, in one pass each that also checks for inf/NaN. Returns a 0-d f32 tensor on
/// that device: 1 when any element was non-finite, else 0 (read it once per step: no host sync per tensor).
/// The gradients must not require grad.
Tensor unscale_grads_(const std::vector<Tensor>& grads, double inv_scale);

// ---- optimizer and gradient-utility ops (kernels/ops/optim_ops.cpp) ---------------------------------------
/// What optimizers, gradient clipping and the DDP reducer use instead of backend kernels. All work in place,
/// outside autograd (the tensors must not require grad), and check their arguments (errors name the op).
///
/// Fused optimizer updates: ONE pass over (param, grad, state...) per parameter, no allocation; the per-element
/// math is kernels/common/optim_math.h, shared by the CPU and CUDA kernels. param and grad: contiguous, same
/// shape, floating dtype and device. State tensors: the param's shape and device, contiguous, all of one dtype,
/// either the param's or f32 for an f16/bf16 param (fp32 moments); undefined where unused
/// (momentum_buffer when momentum == 0, max_exp_avg_sq without amsgrad).
void sgd_step_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdHyper& h);
void adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const Tensor& max_exp_avg_sq, const AdamHyper& h);
/// The multi-tensor forms: the same update of every listed parameter with one set of hyperparameters (one step
/// count), in ONE kernel launch on a GPU (chunked; a loop on the CPU), which is how the optimizers step a
/// parameter group. Every entry is checked as above, and all must share the first entry's device, param dtype
/// and state dtype; a parameter may appear once. The results equal the single-tensor ops bit for bit.
void sgd_step_multi_(const std::vector<SgdTensors>& list, const SgdHyper& h);
void adam_step_multi_(const std::vector<AdamTensors>& list, const AdamHyper& h);
/// The p-norm of all elements of `tensors` together (p > 0 or INFINITY; undefined and empty tensors are
/// skipped; floating, one device), as a 0-d f64 tensor on their device; NaN propagates. Sums are taken in
/// double, one kernel call per dtype: on the CPU each tensor in index order, on a GPU one chunked launch per list
/// and a fixed-order fold of the chunks' partials (the same result on every run). No host read.
Tensor multi_tensor_norm(const std::vector<Tensor>& tensors, double p = 2.0);
/// Every defined tensor *= coef, a 0-d f64 tensor on the tensors' device read there (no host sync), rounded to
/// each tensor's dtype first (so the result equals mul_ by the coefficient cast to that dtype); one kernel call
/// per dtype (one launch on a GPU). Gradient clipping's rescale. Outside autograd, like the updates.
void multi_tensor_scale_(const std::vector<Tensor>& tensors, const Tensor& coef);
/// out = a * s in one pass (out: contiguous, a's shape, dtype and device; a: any strides). Returns out.
Tensor& mul_into_(Tensor& out, const Tensor& a, double s);

}  // namespace volt
