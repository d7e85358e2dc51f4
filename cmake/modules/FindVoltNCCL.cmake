# FindVoltNCCL: NVIDIA NCCL (Volt's GPU process group, distributed/process_group_nccl.cpp).
# Used by Volt's own build and, installed beside voltConfig.cmake, by projects that find a CUDA-enabled Volt
# package, so that the package names the target VoltDeps::NCCL instead of the build machine's library path.
#
# Looks beside the CUDA toolkit first (find CUDAToolkit before this module), then in the usual places.
# Hints: VoltNCCL_ROOT (variable or environment), NCCL_ROOT / NCCL_HOME (environment), CMAKE_PREFIX_PATH.
# Results: VoltNCCL_FOUND, VoltNCCL_VERSION, VoltNCCL_LIBRARY, VoltNCCL_INCLUDE_DIR and the imported target
# VoltDeps::NCCL.
include(${CMAKE_CURRENT_LIST_DIR}/VoltFindLibrary.cmake)
volt_find_library(VoltNCCL TARGET VoltDeps::NCCL NAMES nccl HEADER nccl.h
  LIBRARY_HINTS ${CUDAToolkit_LIBRARY_DIR} INCLUDE_HINTS ${CUDAToolkit_INCLUDE_DIRS}
  HINTS ENV NCCL_ROOT ENV NCCL_HOME
  VERSION_HEADERS nccl.h VERSION_PREFIX NCCL PATCH_FIELD PATCH)
