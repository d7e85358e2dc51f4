# volt_find_library: the body shared by Volt's find modules (FindVoltOpenBLAS, FindVoltCUDNN, FindVoltNCCL) for
# dependencies that ship no CMake package. Installed beside them, so a project that finds the Volt package uses
# the same code.
#
#   volt_find_library(<Pkg> TARGET <imported target> NAMES <library names...> HEADER <header>
#                     [HINTS <dirs...>] [PATH_SUFFIXES <include suffixes...>]
#                     [VERSION_HEADERS <headers...> VERSION_PREFIX <P> PATCH_FIELD <PATCH|PATCHLEVEL>])
#
# Sets <Pkg>_FOUND, <Pkg>_LIBRARY, <Pkg>_INCLUDE_DIR, <Pkg>_VERSION (from the first of VERSION_HEADERS that
# defines <P>_MAJOR, <P>_MINOR and <P>_<PATCH_FIELD>) and creates the UNKNOWN IMPORTED target. HINTS apply to
# both the library and the header (lib64/lib are appended for the library). A macro, so that the results land
# in the including find module's scope as find_package_handle_standard_args expects.
include_guard(GLOBAL)
include(FindPackageHandleStandardArgs)

macro(volt_find_library _vfl_pkg)
  cmake_parse_arguments(_vfl "" "TARGET;HEADER;VERSION_PREFIX;PATCH_FIELD"
    "NAMES;HINTS;LIBRARY_HINTS;INCLUDE_HINTS;PATH_SUFFIXES;VERSION_HEADERS" ${ARGN})
  find_library(${_vfl_pkg}_LIBRARY NAMES ${_vfl_NAMES}
    HINTS ${_vfl_LIBRARY_HINTS} ${_vfl_HINTS} PATH_SUFFIXES lib64 lib)
  find_path(${_vfl_pkg}_INCLUDE_DIR ${_vfl_HEADER}
    HINTS ${_vfl_INCLUDE_HINTS} ${_vfl_HINTS} PATH_SUFFIXES ${_vfl_PATH_SUFFIXES} include)
  mark_as_advanced(${_vfl_pkg}_LIBRARY ${_vfl_pkg}_INCLUDE_DIR)

  unset(${_vfl_pkg}_VERSION)
  if(${_vfl_pkg}_INCLUDE_DIR AND _vfl_VERSION_HEADERS)
    set(_vfl_p "${_vfl_VERSION_PREFIX}")
    foreach(_vfl_h IN LISTS _vfl_VERSION_HEADERS)
      if(EXISTS "${${_vfl_pkg}_INCLUDE_DIR}/${_vfl_h}" AND NOT ${_vfl_pkg}_VERSION)
        file(STRINGS "${${_vfl_pkg}_INCLUDE_DIR}/${_vfl_h}" _vfl_v
          REGEX "^#define ${_vfl_p}_(MAJOR|MINOR|${_vfl_PATCH_FIELD}) +[0-9]+")
        if(_vfl_v MATCHES "${_vfl_p}_MAJOR +([0-9]+).*${_vfl_p}_MINOR +([0-9]+).*${_vfl_p}_${_vfl_PATCH_FIELD} +([0-9]+)")
          set(${_vfl_pkg}_VERSION "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}.${CMAKE_MATCH_3}")
        endif()
      endif()
    endforeach()
  endif()

  find_package_handle_standard_args(${_vfl_pkg} REQUIRED_VARS ${_vfl_pkg}_LIBRARY ${_vfl_pkg}_INCLUDE_DIR
    VERSION_VAR ${_vfl_pkg}_VERSION)

  if(${_vfl_pkg}_FOUND AND NOT TARGET ${_vfl_TARGET})
    add_library(${_vfl_TARGET} UNKNOWN IMPORTED)
    set_target_properties(${_vfl_TARGET} PROPERTIES IMPORTED_LOCATION "${${_vfl_pkg}_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${${_vfl_pkg}_INCLUDE_DIR}")
  endif()
  unset(_vfl_p)
  unset(_vfl_h)
  unset(_vfl_v)
endmacro()
