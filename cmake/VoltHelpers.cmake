# volt_remove_prefixed(VAR BASE PREFIX...): removes from the list VAR (in the caller's scope) every item that starts
# with BASE followed by one of the prefixes. A prefix test, not a regex: paths may hold regex characters.
function(volt_remove_prefixed var base)
  set(_kept ${${var}})
  foreach(_x ${ARGN})
    foreach(_s ${${var}})
      string(FIND "${_s}" "${base}${_x}" _at)
      if(_at EQUAL 0)
        list(REMOVE_ITEM _kept ${_s})
      endif()
    endforeach()
  endforeach()
  set(${var} ${_kept} PARENT_SCOPE)
endfunction()

# volt_add_layer(NAME <layer> DEPS <targets...> [PRIVATE_DEPS <targets...>] [INTERNAL_HEADERS <paths...>]
#                [EXCLUDE <folders...>] [EXPORT <export set>])
# One library per source folder, named volt_<layer> with the alias volt::<layer>: static, or shared with
# BUILD_SHARED_LIBS=ON. Sources are globbed so adding a file needs no CMake edit; .cu files join only when the
# CUDA backend is built. EXCLUDE names subfolders ("cli/", relative to the layer folder) that are a library of
# their own: their sources and headers are left to that library's volt_add_layer. EXPORT: the install export
# set (default voltTargets; an optional library has its own, which voltConfig.cmake loads when its dependencies
# are found).
# Headers (*.h) are public and installed under include/volt/<layer>/ unless INTERNAL_HEADERS names them:
# paths relative to the layer folder, a file ("process.h") or a folder ending in "/" ("cuda/"). A public header
# must include only public ones (the CTest consumer_headers compiles each installed header on its own).
# Each installed header is appended (absolute path) to the global property VOLT_PUBLIC_HEADERS, the input of
# the API docs (docs/CMakeLists.txt).
include(GNUInstallDirs)
function(volt_add_layer)
  cmake_parse_arguments(L "" "NAME;EXPORT" "DEPS;PRIVATE_DEPS;INTERNAL_HEADERS;EXCLUDE" ${ARGN})
  if(NOT L_EXPORT)
    set(L_EXPORT voltTargets)
  endif()
  file(GLOB_RECURSE _cpp CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  set(_srcs ${_cpp})
  if(VOLT_WITH_CUDA)
    file(GLOB_RECURSE _cu CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cu)
    list(APPEND _srcs ${_cu})
  endif()
  volt_remove_prefixed(_srcs "${CMAKE_CURRENT_SOURCE_DIR}/" ${L_EXCLUDE})
  set(_t volt_${L_NAME})
  if(NOT _srcs)  # a layer with headers only (so far)
    add_library(${_t} INTERFACE)
    add_library(volt::${L_NAME} ALIAS ${_t})
    set_target_properties(${_t} PROPERTIES EXPORT_NAME ${L_NAME})
    target_include_directories(${_t} INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
      $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
    target_link_libraries(${_t} INTERFACE ${L_DEPS})
    install(TARGETS ${_t} EXPORT ${L_EXPORT})
    return()
  endif()
  add_library(${_t} ${_srcs})  # STATIC or SHARED after BUILD_SHARED_LIBS
  add_library(volt::${L_NAME} ALIAS ${_t})
  set_target_properties(${_t} PROPERTIES EXPORT_NAME ${L_NAME} CUDA_SEPARABLE_COMPILATION OFF)
  target_include_directories(${_t} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${_t} PUBLIC ${L_DEPS} PRIVATE ${L_PRIVATE_DEPS})
  target_compile_features(${_t} PUBLIC cxx_std_20)
  target_compile_options(${_t} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${VOLT_CPU_FLAGS}>)
  target_compile_options(${_t} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wno-unused-parameter>)
  if(BUILD_SHARED_LIBS)
    # Every symbol stays visible (GCC's default), as in the archives: there are no export macros yet.
    # Installed libraries find each other through $ORIGIN, and their dependencies outside the system
    # directories (a CUDA toolkit, an MPI prefix) through the directories they were linked from.
    # The soname carries major.minor, the compatibility voltConfigVersion.cmake promises (SameMinorVersion).
    set_target_properties(${_t} PROPERTIES INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH TRUE
      VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
    # Every library must name the libraries it calls (a layer calling a layer above it fails to link here
    # instead of in a consumer). Not under the sanitizers, whose runtime only the executable links.
    if(NOT VOLT_SANITIZE AND CMAKE_SYSTEM_NAME STREQUAL "Linux")
      target_link_options(${_t} PRIVATE LINKER:--no-undefined)
    endif()
  endif()
  install(TARGETS ${_t} EXPORT ${L_EXPORT} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  file(GLOB_RECURSE _hdr RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.h)
  volt_remove_prefixed(_hdr "" ${L_EXCLUDE})
  foreach(i ${L_INTERNAL_HEADERS})
    if(NOT EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${i})
      message(FATAL_ERROR "volt_add_layer(${L_NAME}): INTERNAL_HEADERS names ${i}, which does not exist")
    endif()
  endforeach()
  file(RELATIVE_PATH _layer_dir ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  foreach(h ${_hdr})
    set(_internal OFF)
    foreach(i ${L_INTERNAL_HEADERS})
      string(FIND "${h}" "${i}" _at)
      if(h STREQUAL i OR (i MATCHES "/$" AND _at EQUAL 0))
        set(_internal ON)
      endif()
    endforeach()
    if(NOT _internal)
      get_filename_component(_d ${h} DIRECTORY)
      install(FILES ${h} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/volt/${_layer_dir}/${_d})
      set_property(GLOBAL APPEND PROPERTY VOLT_PUBLIC_HEADERS ${CMAKE_CURRENT_SOURCE_DIR}/${h})
    endif()
  endforeach()
endfunction()

# volt_add_program(<name> <sources...>): an executable linked against the whole runtime.
function(volt_add_program name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE volt::trainer)
  target_compile_options(${name} PRIVATE ${VOLT_CPU_FLAGS})
endfunction()

# volt_add_test_suite(<folder>): one GoogleTest executable test_<folder> from tests/<folder>/*.cpp, each test
# registered with CTest.
function(volt_add_test_suite folder)
  file(GLOB _src CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/${folder}/*.cpp)
  if(NOT _src)
    return()
  endif()
  add_executable(test_${folder} ${_src})
  target_link_libraries(test_${folder} PRIVATE volt::trainer GTest::gtest GTest::gtest_main)
  target_include_directories(test_${folder} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_compile_options(test_${folder} PRIVATE ${VOLT_CPU_FLAGS})
  gtest_discover_tests(test_${folder} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60
    PROPERTIES ENVIRONMENT "VOLT_TEST_DATA=${PROJECT_SOURCE_DIR}/tests/data" TIMEOUT 300)
endfunction()
