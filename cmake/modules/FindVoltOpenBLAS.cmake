# FindVoltOpenBLAS: OpenBLAS's CBLAS interface (Volt's CPU f32/f64 GEMM, kernels/cpu/gemm.cpp).
# Used by Volt's own build and, installed beside voltConfig.cmake, by projects that find the Volt package, so
# that the package names the target VoltDeps::OpenBLAS instead of the build machine's library path.
#
# Hints: VoltOpenBLAS_ROOT (variable or environment), CMAKE_PREFIX_PATH, or the cache entries below.
# Results: VoltOpenBLAS_FOUND, VoltOpenBLAS_LIBRARY, VoltOpenBLAS_INCLUDE_DIR (the directory with cblas.h)
# and the imported target VoltDeps::OpenBLAS.
# Debian/Ubuntu keep the pthread variant's cblas.h in <include>/openblas-pthread, other layouts in openblas/.
find_library(VoltOpenBLAS_LIBRARY NAMES openblas)
find_path(VoltOpenBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread openblas)
mark_as_advanced(VoltOpenBLAS_LIBRARY VoltOpenBLAS_INCLUDE_DIR)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(VoltOpenBLAS REQUIRED_VARS VoltOpenBLAS_LIBRARY VoltOpenBLAS_INCLUDE_DIR)

if(VoltOpenBLAS_FOUND AND NOT TARGET VoltDeps::OpenBLAS)
  add_library(VoltDeps::OpenBLAS UNKNOWN IMPORTED)
  set_target_properties(VoltDeps::OpenBLAS PROPERTIES IMPORTED_LOCATION "${VoltOpenBLAS_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${VoltOpenBLAS_INCLUDE_DIR}")
endif()
