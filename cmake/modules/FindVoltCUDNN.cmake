# FindVoltCUDNN: NVIDIA cuDNN (Volt's CUDA convolution, pooling and batch-norm kernels, kernels/cuda/).
# Used by Volt's own build and, installed beside voltConfig.cmake, by projects that find a CUDA-enabled Volt
# package, so that the package names the target VoltDeps::cuDNN instead of the build machine's library path.
#
# Looks beside the CUDA toolkit first (find CUDAToolkit before this module), then in the usual places.
# Hints: VoltCUDNN_ROOT (variable or environment), CUDNN_ROOT / CUDNN_PATH (environment), CMAKE_PREFIX_PATH.
# Results: VoltCUDNN_FOUND, VoltCUDNN_VERSION, VoltCUDNN_LIBRARY, VoltCUDNN_INCLUDE_DIR and the imported
# target VoltDeps::cuDNN.
find_library(VoltCUDNN_LIBRARY NAMES cudnn
  HINTS ${CUDAToolkit_LIBRARY_DIR} ENV CUDNN_ROOT ENV CUDNN_PATH PATH_SUFFIXES lib64 lib)
find_path(VoltCUDNN_INCLUDE_DIR cudnn.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV CUDNN_ROOT ENV CUDNN_PATH PATH_SUFFIXES include)
mark_as_advanced(VoltCUDNN_LIBRARY VoltCUDNN_INCLUDE_DIR)

# cuDNN 8 and later keep the version in cudnn_version.h, older ones in cudnn.h.
unset(VoltCUDNN_VERSION)
if(VoltCUDNN_INCLUDE_DIR)
  foreach(_volt_h cudnn_version.h cudnn.h)
    if(EXISTS "${VoltCUDNN_INCLUDE_DIR}/${_volt_h}" AND NOT VoltCUDNN_VERSION)
      file(STRINGS "${VoltCUDNN_INCLUDE_DIR}/${_volt_h}" _volt_v REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) +[0-9]+")
      if(_volt_v MATCHES "CUDNN_MAJOR +([0-9]+).*CUDNN_MINOR +([0-9]+).*CUDNN_PATCHLEVEL +([0-9]+)")
        set(VoltCUDNN_VERSION "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}.${CMAKE_MATCH_3}")
      endif()
    endif()
  endforeach()
  unset(_volt_h)
  unset(_volt_v)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(VoltCUDNN REQUIRED_VARS VoltCUDNN_LIBRARY VoltCUDNN_INCLUDE_DIR
  VERSION_VAR VoltCUDNN_VERSION)

if(VoltCUDNN_FOUND AND NOT TARGET VoltDeps::cuDNN)
  add_library(VoltDeps::cuDNN UNKNOWN IMPORTED)
  set_target_properties(VoltDeps::cuDNN PROPERTIES IMPORTED_LOCATION "${VoltCUDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${VoltCUDNN_INCLUDE_DIR}")
endif()
