# FindVoltNCCL: NVIDIA NCCL (Volt's GPU process group, distributed/process_group_nccl.cpp).
# Used by Volt's own build and, installed beside voltConfig.cmake, by projects that find a CUDA-enabled Volt
# package, so that the package names the target VoltDeps::NCCL instead of the build machine's library path.
#
# Looks beside the CUDA toolkit first (find CUDAToolkit before this module), then in the usual places.
# Hints: VoltNCCL_ROOT (variable or environment), NCCL_ROOT / NCCL_HOME (environment), CMAKE_PREFIX_PATH.
# Results: VoltNCCL_FOUND, VoltNCCL_VERSION, VoltNCCL_LIBRARY, VoltNCCL_INCLUDE_DIR and the imported target
# VoltDeps::NCCL.
find_library(VoltNCCL_LIBRARY NAMES nccl
  HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_ROOT ENV NCCL_HOME PATH_SUFFIXES lib64 lib)
find_path(VoltNCCL_INCLUDE_DIR nccl.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_ROOT ENV NCCL_HOME PATH_SUFFIXES include)
mark_as_advanced(VoltNCCL_LIBRARY VoltNCCL_INCLUDE_DIR)

unset(VoltNCCL_VERSION)
if(VoltNCCL_INCLUDE_DIR AND EXISTS "${VoltNCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${VoltNCCL_INCLUDE_DIR}/nccl.h" _volt_v REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  if(_volt_v MATCHES "NCCL_MAJOR +([0-9]+).*NCCL_MINOR +([0-9]+).*NCCL_PATCH +([0-9]+)")
    set(VoltNCCL_VERSION "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}.${CMAKE_MATCH_3}")
  endif()
  unset(_volt_v)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(VoltNCCL REQUIRED_VARS VoltNCCL_LIBRARY VoltNCCL_INCLUDE_DIR
  VERSION_VAR VoltNCCL_VERSION)

if(VoltNCCL_FOUND AND NOT TARGET VoltDeps::NCCL)
  add_library(VoltDeps::NCCL UNKNOWN IMPORTED)
  set_target_properties(VoltDeps::NCCL PROPERTIES IMPORTED_LOCATION "${VoltNCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${VoltNCCL_INCLUDE_DIR}")
endif()
