#pragma once
/// @file
/// The layer ops beyond kernels/ops.h: 1-D convolution, transposed 2-D convolution, nearest and bilinear
/// interpolation, adaptive average pooling. Like every op they check their arguments (volt::Error naming the op,
/// the argument and what was expected), run on the device of their inputs and record autograd history.
///
/// conv1d, interpolate and adaptive_avg_pool2d are compositions of ops.h's public ops (conv2d, index_select,
/// mul/add, matmul), so they run wherever those do and their gradients are those ops' gradients.
/// conv_transpose2d runs the convolution backend's data-gradient kernel (CPU: col2im + GEMM; CUDA: cuDNN's
/// backward-data) as its forward.
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <volt/kernels/ops.h>

namespace volt {

// ---- convolution (kernels/ops/conv_transpose_ops.cpp) ----------------------------------------------------
/// x (N, C_in, L) or unbatched (C_in, L), weight (C_out, C_in / groups, K), bias (C_out) or undefined
/// -> (N, C_out, L_out), L_out = (L + 2*padding - dilation*(K-1) - 1) / stride + 1. Runs conv2d over a unit
/// height dim; groups > 1 splits the channels into `groups` independent convolutions (C_in and C_out divisible
/// by groups). Autocast: as conv2d (lowered to the autocast dtype).
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);

/// The transposed convolution (the gradient of conv2d with respect to its input), PyTorch's argument order.
/// x (N, C_in, H, W) or unbatched (C_in, H, W), weight (C_in, C_out / groups, kH, kW), bias (C_out) or undefined
/// -> (N, C_out, H_out, W_out) with
///   H_out = (H - 1)*stride - 2*padding + dilation*(kH - 1) + output_padding + 1   (W alike).
/// output_padding (extra rows/columns at the bottom/right) must be smaller than the stride or the dilation of
/// its axis, as in PyTorch. groups: C_in and C_out split into `groups` independent transposed convolutions.
/// Gradients for x (a conv2d of the output gradient), weight (the backend's weight-gradient kernel) and bias.
/// The backward's kernels are not themselves differentiable: second derivatives through it throw (kernels/grad.h).
/// The CPU computes f16/bf16 in f32; CUDA runs every floating dtype in cuDNN. Autocast: lowered like conv2d.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        std::pair<int64_t, int64_t> stride = {1, 1}, std::pair<int64_t, int64_t> padding = {0, 0},
                        std::pair<int64_t, int64_t> output_padding = {0, 0}, int64_t groups = 1,
                        std::pair<int64_t, int64_t> dilation = {1, 1});

// ---- interpolation and adaptive pooling (kernels/ops/upsample_ops.cpp) -----------------------------------
enum class InterpolateMode { Nearest, Bilinear };
/// "nearest" or "bilinear"; anything else throws naming the accepted modes.
InterpolateMode parse_interpolate_mode(std::string_view mode);

/// What to resize to, and how. Exactly one of `size` and `scale_factor` is given, each with one value (both
/// spatial dims) or two (height, width).
struct InterpolateOptions {
  std::vector<int64_t> size;         ///< output (H, W)
  std::vector<double> scale_factor;  ///< output = floor(input * scale_factor) per dim
  InterpolateMode mode = InterpolateMode::Nearest;
  /// Bilinear only (nearest refuses it, as PyTorch does); unset means false. true: the corner pixels of input and
  /// output are aligned (source = dst * (in - 1) / (out - 1)); false: pixel centres (source = (dst + 0.5) * scale
  /// - 0.5, clamped at 0), with scale = 1 / scale_factor when a scale factor was given, else in / out.
  std::optional<bool> align_corners;
};

/// Resizes x (N, C, H, W) to (N, C, H_out, W_out) as torch.nn.functional.interpolate does (with
/// recompute_scale_factor unset): nearest picks source index min(floor(dst * scale), in - 1) (scale computed in
/// f32, as PyTorch); bilinear blends the two nearest rows then the two nearest columns. Any floating dtype;
/// runs in x's dtype (autocast leaves it alone).
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);

/// x (N, C, H, W) or (C, H, W) -> (..., OH, OW): output cell (i, j) averages rows [floor(i*H/OH), ceil((i+1)*H/OH))
/// and columns [floor(j*W/OW), ceil((j+1)*W/OW)), PyTorch's bins (which overlap when H is not a multiple of OH).
/// Computed as two matmuls with averaging matrices, in x's dtype also under autocast.
Tensor adaptive_avg_pool2d(const Tensor& x, std::pair<int64_t, int64_t> output_size);
inline Tensor adaptive_avg_pool2d(const Tensor& x, int64_t output_size) {
  return adaptive_avg_pool2d(x, {output_size, output_size});
}

}  // namespace volt
