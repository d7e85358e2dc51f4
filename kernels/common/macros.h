#pragma once
// VOLT_HD marks math shared by the CPU loops and the CUDA kernels (kernels/common/ is header-only).
#if defined(__CUDACC__)
#define VOLT_HD __host__ __device__ __forceinline__
#else
#define VOLT_HD inline
#endif
