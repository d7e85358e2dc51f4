#pragma once
/// @file
/// Tensor ops for porting research code from PyTorch: log-sum-exp, scans, sorting, masking, triangular parts,
/// scatter/index adds, padding, flipping, repetition, splitting, einsum, norms, standard deviation and boolean
/// reductions. Each follows the PyTorch function of the same name (arguments, defaults, tie and NaN rules) except
/// where noted, runs on the device of its inputs (CPU and CUDA), checks its arguments (volt::Error naming the op,
/// the argument and what was expected) and records autograd history. Unless noted, the backward formulas are
/// written in differentiable ops, so second derivatives (autograd::grad with create_graph, kernels/grad.h) work.
///
/// `dim` arguments may be negative (counted from the end). `dims` empty means every dim.
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include <volt/kernels/tensor.h>

namespace volt {

// ---- reductions ----------------------------------------------------------------------------------------------
/// log(sum(exp(x), dims)), computed stably (the max is subtracted first; all -inf gives -inf, +inf gives +inf).
/// Floating x. Under autocast f16/bf16 x runs in fp32.
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
/// The vector p-norm over `dims`: (sum |x|^p)^(1/p) for p > 0, max |x| for p = INFINITY, and also p = 0 (the count
/// of non-zeros, not differentiable) and p = -INFINITY (min |x|). Floating x. The gradient at x = 0 is 0 (p = 2:
/// the subgradient PyTorch uses; p = +-INFINITY: to the first extremal element, where PyTorch splits it among ties).
/// Under autocast f16/bf16 x runs in fp32.
Tensor norm(const Tensor& x, double p = 2.0, const std::vector<int64_t>& dims = {}, bool keepdim = false);
/// sqrt(var(x, dims)): sample (unbiased, the default) or population standard deviation.
Tensor std(const Tensor& x, const std::vector<int64_t>& dims = {}, bool unbiased = true, bool keepdim = false);
/// Whether any / every element over `dims` is non-zero (true for bool). Any dtype; returns bool; not
/// differentiable.
Tensor any(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor all(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);

// ---- scans (kernels/cpu/scan_sort.cpp, kernels/cuda/scan_sort.cu) --------------------------------------------
/// Inclusive prefix sum / product along `dim`. Integer and bool inputs give int64 (as PyTorch); f16/bf16 accumulate
/// in f32 and, under autocast, run in fp32. CUDA: one thread per line along `dim` (fast for many short lines, serial
/// along one long line). cumprod's gradient is exact where x has zeros (its first-order backward is a kernel; with
/// create_graph it is recomputed in differentiable ops, which costs O(n^2) memory per line).
Tensor cumsum(const Tensor& x, int64_t dim);
Tensor cumprod(const Tensor& x, int64_t dim);

// ---- sorting -------------------------------------------------------------------------------------------------
/// {values, int64 indices} of x sorted along `dim`. The sort is stable (equal values keep their order, on every
/// device) and NaN sorts as larger than every number (last ascending, first descending). Any dtype. The values
/// are differentiable (the gradient goes back to the positions the indices name).
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);
/// {values, int64 indices} of the k largest (or smallest) elements along `dim`, in sorted order; ties resolve to
/// the lower index first (PyTorch leaves their order unspecified). 0 <= k <= x.size(dim).
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);

// ---- masking and triangular parts ------------------------------------------------------------------------------
/// x with `value` where the bool `mask` (broadcast to x's shape) is true. Differentiable in x.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
/// The lower / upper triangle of the last two dims: elements with col - row <= k (tril) or >= k (triu) kept, the
/// rest zero. x has at least 2 dims.
Tensor tril(const Tensor& x, int64_t k = 0);
Tensor triu(const Tensor& x, int64_t k = 0);

// ---- scatter ----------------------------------------------------------------------------------------------------
/// x with src added at the positions `index` names along `dim`: out[i][index[i][j]][k] += src[i][j][k] (for dim 1).
/// index: int64, the same number of dims as x, index.size(d) <= src.size(d) for every d and <= x.size(d) for
/// d != dim; values in [0, x.size(dim)). Only src's elements under index's shape are used. Floating x and src of
/// one dtype. Sums accumulate in f32/f64; the CPU adds in index order (deterministic), CUDA with atomicAdd (the
/// order of additions into one position, and so the last bits of float sums, can vary run to run).
/// Differentiable in x and src.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
/// x with src's slices added along `dim` at the positions of the 1-D int64/int32 `index`:
/// out.select(dim, index[i]) += src.select(dim, i). src has x's shape except src.size(dim) == index.numel();
/// duplicate indices accumulate. Same dtype, accumulation and determinism rules as scatter_add.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

// ---- shape ops --------------------------------------------------------------------------------------------------
/// Constant padding. `pads` lists (before, after) pairs starting from the LAST dim, as torch.nn.functional.pad:
/// {left, right} pads the last dim, {left, right, top, bottom} the last two. Negative pads crop.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value = 0.0);
/// x with the listed dims reversed (a copy; PyTorch's flip copies too).
Tensor flip(const Tensor& x, const std::vector<int64_t>& dims);
/// x tiled: repeats.size() >= x.dim(); leading extra repeats add dims (torch.Tensor.repeat).
Tensor repeat(const Tensor& x, const std::vector<int64_t>& repeats);
/// Views of consecutive pieces along `dim`: of `split_size` each (the last may be smaller), or of the listed sizes
/// (which must add up to x.size(dim)). Differentiable (they are views).
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim = 0);
/// `chunks` pieces of ceil(size / chunks) along `dim` (fewer when the size does not need them all), as torch.chunk.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// ---- einsum -----------------------------------------------------------------------------------------------------
/// Einstein summation over one or more operands, e.g. "ij,jk->ik" (matmul), "bij,bjk->bik" (bmm), "i,j->ij"
/// (outer), "ij->ji" (transpose), "ij->" or "ij->j" (sums), "bhqd,bhkd->bhqk" (attention scores), "i,i->" (dot),
/// and the implicit form without "->" (output: the letters used once, in alphabetical order). Letters a-z and A-Z;
/// spaces are ignored. Operands are contracted left to right, each pair as a broadcast multiply or (when indices
/// are summed) a batched matmul, so the CUDA path and autograd come from those ops. Not supported (a volt::Error
/// says so): ellipses ("..."), and an index repeated within one operand (diagonals and traces, e.g. "ii->i").
Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands);

}  // namespace volt
