#pragma once
/// @file
/// The cuDNN benchmark switch (upstream's torch.backends.cudnn.benchmark; the Trainer's `benchmark` option sets
/// it). Process-wide, default off.
///
/// @code{.unparsed}
///   off: each convolution configuration gets the algorithm cuDNN's heuristics rank first
///        (cudnnGet*Algorithm_v7): no trial runs, the same choice on every run of the same cuDNN.
///   on:  the first call with a configuration times the candidate algorithms on the real tensors
///        (cudnnFind*AlgorithmEx, a workspace of at most 256 MiB from Volt's CUDA allocator) and keeps the
///        fastest. Faster steps when shapes repeat; the first step of each shape is slower, and the choice may
///        differ between runs.
/// @endcode
///
/// The switch is part of each convolution plan's cache key (kernels/common/conv_plan_key.h), so flipping it
/// plans again rather than reusing a choice made the other way. It has no effect on the CPU, which has one
/// convolution algorithm.
namespace volt {

void set_cudnn_benchmark(bool on);
bool cudnn_benchmark();

}  // namespace volt
