# Builds and runs tests/consumer/project against Volt, as an outside user would. Run with cmake -P:
#   cmake -DMODE=package -DVOLT_SOURCE_DIR=<src> -DVOLT_BINARY_DIR=<built tree> -DWORK_DIR=<scratch> -P run_consumer.cmake
#     installs the already-built tree into <scratch>/prefix, then find_package(volt) from there;
#   cmake -DMODE=subdirectory -DVOLT_SOURCE_DIR=<src> -DWORK_DIR=<scratch> -P run_consumer.cmake
#     add_subdirectory() of the source tree with CUDA, tests, examples and benchmarks off.
# Optional: -DGENERATOR=<name> -DCXX_COMPILER=<path> -DJOBS=<n>. Fails (nonzero exit) on any step.
cmake_minimum_required(VERSION 3.24)

foreach(var MODE VOLT_SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT DEFINED JOBS)
  set(JOBS 2)
endif()

# Runs a command; on failure prints its output and stops. The output is returned in ${out_var}.
function(run_step name out_var)
  message(STATUS "consumer [${MODE}]: ${name}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer [${MODE}]: ${name} failed (exit ${rc})\ncommand: ${ARGN}\n${out}\n${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(project_dir "${VOLT_SOURCE_DIR}/tests/consumer/project")
set(build_dir "${WORK_DIR}/build")
set(common_args -S "${project_dir}" -B "${build_dir}" -DCMAKE_BUILD_TYPE=Release)
if(GENERATOR)
  list(APPEND common_args -G "${GENERATOR}")
endif()
if(CXX_COMPILER)
  list(APPEND common_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()

if(MODE STREQUAL "package")
  if(NOT DEFINED VOLT_BINARY_DIR)
    message(FATAL_ERROR "run_consumer.cmake: MODE=package needs -DVOLT_BINARY_DIR=<built Volt tree>")
  endif()
  set(prefix "${WORK_DIR}/prefix")
  run_step("install the built tree into ${prefix}" _out "${CMAKE_COMMAND}" --install "${VOLT_BINARY_DIR}" --prefix "${prefix}")
  file(GLOB_RECURSE config_files "${prefix}/*/voltConfig.cmake")
  if(NOT config_files)
    message(FATAL_ERROR "consumer [package]: the install put no voltConfig.cmake under ${prefix}")
  endif()
  run_step("configure against the installed package" _out "${CMAKE_COMMAND}" ${common_args}
           -DVOLT_CONSUMER_MODE=package "-DCMAKE_PREFIX_PATH=${prefix}")
elseif(MODE STREQUAL "subdirectory")
  run_step("configure with add_subdirectory" _out "${CMAKE_COMMAND}" ${common_args} -DVOLT_CONSUMER_MODE=subdirectory
           "-DVOLT_SOURCE_DIR=${VOLT_SOURCE_DIR}" -DVOLT_CUDA=OFF -DVOLT_BUILD_TESTS=OFF -DVOLT_BUILD_EXAMPLES=OFF
           -DVOLT_BUILD_BENCHMARKS=OFF -DVOLT_MPI=OFF)
else()
  message(FATAL_ERROR "run_consumer.cmake: MODE must be package or subdirectory, got '${MODE}'")
endif()

run_step("build" _out "${CMAKE_COMMAND}" --build "${build_dir}" --target volt_consumer volt_consumer_train -j ${JOBS})
find_program(consumer_exe volt_consumer PATHS "${build_dir}" "${build_dir}/Release" NO_DEFAULT_PATH REQUIRED)
run_step("run" output "${consumer_exe}")
message(STATUS "${output}")
if(NOT output MATCHES "volt-consumer: y=152 grad_sum=48" OR NOT output MATCHES "volt-consumer: ok")
  message(FATAL_ERROR "consumer [${MODE}]: unexpected output:\n${output}")
endif()
find_program(train_exe volt_consumer_train PATHS "${build_dir}" "${build_dir}/Release" NO_DEFAULT_PATH REQUIRED)
run_step("train from .npy files" train_output "${train_exe}")
message(STATUS "${train_output}")
if(NOT train_output MATCHES "volt-consumer-train: samples=256 steps=160" OR NOT train_output MATCHES "volt-consumer-train: ok")
  message(FATAL_ERROR "consumer [${MODE}]: unexpected training output:\n${train_output}")
endif()
message(STATUS "consumer [${MODE}]: passed")
