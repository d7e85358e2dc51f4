#pragma once
/// @file
/// Tensors and their differentiable operations: volt::Tensor, dtypes, devices, autograd, random generators,
/// autocast, and every op in `<volt/kernels/ops.h>` (factories, elementwise, reductions, views, indexing, linear
/// algebra, convolution, normalisation, losses, attention), the fused ops of `<volt/kernels/fused_ops.h>`, the
/// math ops of `<volt/kernels/math_ops.h>` (sin, cos, erf, log1p, expm1, softplus, elu, mish, floor, round,
/// linspace, randint), the research op set of `<volt/kernels/tensor_ops.h>` (logsumexp, cumsum, sort/topk,
/// scatter/index adds, pad, einsum, norm, ...), and the cuDNN benchmark switch.
#include <volt/config.h>
#include <volt/kernels/cudnn_benchmark.h>
#include <volt/kernels/fused_ops.h>
#include <volt/kernels/grad.h>
#include <volt/kernels/graph.h>
#include <volt/kernels/kernel_support.h>
#include <volt/kernels/math_ops.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/tensor_ops.h>
#include <volt/runtime/allocator.h>
#include <volt/runtime/autocast.h>
#include <volt/kernels/autograd.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/device.h>
#include <volt/runtime/dtype.h>
#include <volt/runtime/error.h>
#include <volt/runtime/generator.h>
#include <volt/kernels/tensor.h>
