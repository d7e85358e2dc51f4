# FindVoltCUDNN: NVIDIA cuDNN (Volt's CUDA convolution, pooling and batch-norm kernels, kernels/cuda/).
# Used by Volt's own build and, installed beside voltConfig.cmake, by projects that find a CUDA-enabled Volt
# package, so that the package names the target VoltDeps::cuDNN instead of the build machine's library path.
#
# Looks beside the CUDA toolkit first (find CUDAToolkit before this module), then in the usual places.
# Hints: VoltCUDNN_ROOT (variable or environment), CUDNN_ROOT / CUDNN_PATH (environment), CMAKE_PREFIX_PATH.
# Results: VoltCUDNN_FOUND, VoltCUDNN_VERSION, VoltCUDNN_LIBRARY, VoltCUDNN_INCLUDE_DIR and the imported
# target VoltDeps::cuDNN. cuDNN 8 and later keep the version in cudnn_version.h, older ones in cudnn.h.
include(${CMAKE_CURRENT_LIST_DIR}/VoltFindLibrary.cmake)
volt_find_library(VoltCUDNN TARGET VoltDeps::cuDNN NAMES cudnn HEADER cudnn.h
  LIBRARY_HINTS ${CUDAToolkit_LIBRARY_DIR} INCLUDE_HINTS ${CUDAToolkit_INCLUDE_DIRS}
  HINTS ENV CUDNN_ROOT ENV CUDNN_PATH
  VERSION_HEADERS cudnn_version.h cudnn.h VERSION_PREFIX CUDNN PATCH_FIELD PATCHLEVEL)
