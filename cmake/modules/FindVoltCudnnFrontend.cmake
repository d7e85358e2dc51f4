# FindVoltCudnnFrontend: the cuDNN frontend's C++ headers (header-only, NVIDIA/cudnn-frontend), which Volt's CUDA
# build uses for cuDNN's fused SDPA (flash attention, kernels/cuda/attention_cudnn.cu). The PyPI wheel
# nvidia-cudnn-frontend ships them under include/; scripts/setup.sh unpacks that folder into .deps/cudnn_frontend/.
# Compiled into volt_kernels, so a project that uses an installed Volt never needs them.
#
# Looks in VOLT_CUDNN_FRONTEND_INCLUDE_DIR when it is set (cache; point it at any copy of the headers), else in
# <source>/.deps/cudnn_frontend/include (scripts/setup.sh), the include/ folder of Python's site-packages (user and
# system; `pip install nvidia-cudnn-frontend` puts the headers there), $CUDNN_FRONTEND_PATH/include and the usual
# places. Results: VoltCudnnFrontend_FOUND, VoltCudnnFrontend_VERSION (cudnn_frontend_version.h) and the cache
# variable VOLT_CUDNN_FRONTEND_INCLUDE_DIR (the folder holding cudnn_frontend.h).
include(FindPackageHandleStandardArgs)

set(_vcf_hints ${PROJECT_SOURCE_DIR}/.deps/cudnn_frontend/include)
find_program(_vcf_python NAMES python3 python)
mark_as_advanced(_vcf_python)
if(_vcf_python)
  execute_process(COMMAND ${_vcf_python} -c
    "import site, sysconfig; print(';'.join([sysconfig.get_paths()['purelib'], site.getusersitepackages()]))"
    OUTPUT_VARIABLE _vcf_site OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _vcf_rc)
  if(_vcf_rc EQUAL 0)
    foreach(_d IN LISTS _vcf_site)
      list(APPEND _vcf_hints ${_d}/include)
    endforeach()
  endif()
endif()
find_path(VOLT_CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ${_vcf_hints} ENV CUDNN_FRONTEND_PATH
  PATH_SUFFIXES include DOC "Folder holding the cuDNN frontend's cudnn_frontend.h (scripts/setup.sh fetches it)")

unset(VoltCudnnFrontend_VERSION)
if(VOLT_CUDNN_FRONTEND_INCLUDE_DIR AND EXISTS "${VOLT_CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend_version.h")
  file(STRINGS "${VOLT_CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend_version.h" _vcf_v
    REGEX "^#define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION +[0-9]+")
  if(_vcf_v MATCHES "MAJOR_VERSION +([0-9]+).*MINOR_VERSION +([0-9]+).*PATCH_VERSION +([0-9]+)")
    set(VoltCudnnFrontend_VERSION "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}.${CMAKE_MATCH_3}")
  endif()
endif()
# A folder set by hand must hold the header too.
set(VoltCudnnFrontend_HEADER "")
if(VOLT_CUDNN_FRONTEND_INCLUDE_DIR AND EXISTS "${VOLT_CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend.h")
  set(VoltCudnnFrontend_HEADER "${VOLT_CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend.h")
endif()
find_package_handle_standard_args(VoltCudnnFrontend REQUIRED_VARS VoltCudnnFrontend_HEADER
  VOLT_CUDNN_FRONTEND_INCLUDE_DIR VERSION_VAR VoltCudnnFrontend_VERSION)
unset(_vcf_hints)
unset(_vcf_site)
unset(_vcf_rc)
unset(_vcf_v)
