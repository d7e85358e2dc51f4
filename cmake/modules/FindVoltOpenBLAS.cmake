# FindVoltOpenBLAS: OpenBLAS's CBLAS interface (Volt's CPU f32/f64 GEMM, kernels/cpu/gemm.cpp).
# Used by Volt's own build and, installed beside voltConfig.cmake, by projects that find the Volt package, so
# that the package names the target VoltDeps::OpenBLAS instead of the build machine's library path.
#
# Hints: VoltOpenBLAS_ROOT (variable or environment), CMAKE_PREFIX_PATH, or the cache entries below.
# Results: VoltOpenBLAS_FOUND, VoltOpenBLAS_LIBRARY, VoltOpenBLAS_INCLUDE_DIR (the directory with cblas.h)
# and the imported target VoltDeps::OpenBLAS.
# Debian/Ubuntu keep the pthread variant's cblas.h in <include>/openblas-pthread, other layouts in openblas/.
include(${CMAKE_CURRENT_LIST_DIR}/VoltFindLibrary.cmake)
volt_find_library(VoltOpenBLAS TARGET VoltDeps::OpenBLAS NAMES openblas HEADER cblas.h
  PATH_SUFFIXES openblas-pthread openblas)
