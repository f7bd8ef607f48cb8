# The shared library, the Python module and what `cmake --install` puts where.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# ---- shared library: liblmhead.so.<major>.<minor> ------------------------------------------------
# The whole static library goes in, but only the public API's symbols leave it (lmhead.map): the
# internal namespaces can change without an ABI break. Before 1.0 every minor version may break
# the ABI, so the SONAME carries the minor version too.
option(LMHEAD_SHARED "Build the shared library liblmhead.so" ON)
if(LMHEAD_SHARED)
  add_library(lmhead_shared SHARED ${CMAKE_CURRENT_LIST_DIR}/empty.cpp)
  target_link_libraries(lmhead_shared PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,lmhead_core>")
  target_include_directories(lmhead_shared PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                                  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_options(lmhead_shared PRIVATE "LINKER:--version-script=${CMAKE_CURRENT_LIST_DIR}/lmhead.map")
  if(NOT LMHEAD_SANITIZE AND NOT LMHEAD_FUZZ)
    # Every symbol resolved at link time; sanitizer runtimes are the program's, so not there.
    target_link_options(lmhead_shared PRIVATE "LINKER:--no-undefined")
  endif()
  set_target_properties(lmhead_shared PROPERTIES
    OUTPUT_NAME lmhead EXPORT_NAME lmhead
    VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
    LINK_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/lmhead.map)
  add_library(lmhead::lmhead ALIAS lmhead_shared)
else()
  add_library(lmhead::lmhead ALIAS lmhead_core)
endif()
add_library(lmhead::lmhead_static ALIAS lmhead_core)

# ---- Python module (nanobind) --------------------------------------------------------------------
# AUTO: built when nanobind is importable by the Python found (scripts/install-deps.sh --python puts
# it in build/pyenv); `pip install .` (scikit-build-core) turns it ON and installs only it.
set(LMHEAD_PYTHON "AUTO" CACHE STRING "Build the Python module: AUTO (when nanobind is found), ON, OFF")
set(LMHEAD_HAVE_PYTHON OFF)
if(NOT LMHEAD_PYTHON STREQUAL "OFF")
  if(Python3_EXECUTABLE AND NOT Python_EXECUTABLE)
    set(Python_EXECUTABLE "${Python3_EXECUTABLE}")
  endif()
  find_package(Python 3.9 COMPONENTS Interpreter Development.Module)
  if(Python_FOUND)
    execute_process(COMMAND "${Python_EXECUTABLE}" -m nanobind --cmake_dir
                    OUTPUT_VARIABLE _nb_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _nb_rc)
    if(_nb_rc EQUAL 0)
      list(APPEND CMAKE_PREFIX_PATH "${_nb_dir}")
      find_package(nanobind CONFIG)
    endif()
  endif()
  if(nanobind_FOUND)
    set(LMHEAD_HAVE_PYTHON ON)
  elseif(LMHEAD_PYTHON STREQUAL "ON")
    message(FATAL_ERROR "LMHEAD_PYTHON=ON but Python's development files or nanobind were not found "
                        "(python -m pip install nanobind)")
  endif()
endif()
message(STATUS "lmhead: Python module ${LMHEAD_HAVE_PYTHON}")
if(LMHEAD_HAVE_PYTHON)
  # The stable ABI (one wheel for every CPython >= 3.12) where the interpreter allows it.
  nanobind_add_module(_lmhead NB_STATIC STABLE_ABI ${PROJECT_SOURCE_DIR}/python/src/lmhead_py.cpp
                    ${PROJECT_SOURCE_DIR}/python/src/compare_py.cpp)
  target_include_directories(_lmhead PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(_lmhead PRIVATE lmhead_core)
  target_compile_definitions(_lmhead PRIVATE LMHEAD_VERSION_STRING="${PROJECT_VERSION}")
  if(SKBUILD)
    install(TARGETS _lmhead LIBRARY DESTINATION lmhead COMPONENT python)
  else()
    # In the build tree: build/<preset>/python/lmhead is an importable copy of the package, what
    # the pytest suite runs against (PYTHONPATH=build/<preset>/python).
    set(_pkg ${CMAKE_BINARY_DIR}/python/lmhead)
    set_target_properties(_lmhead PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${_pkg})
    file(GLOB LMHEAD_PY_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/python/lmhead/*.py)
    add_custom_command(TARGET _lmhead POST_BUILD
      COMMAND ${CMAKE_COMMAND} -E copy_if_different ${LMHEAD_PY_SOURCES} ${_pkg}/
      COMMENT "Copying the lmhead Python package next to its module")
    # Edits to the .py files alone also reach the copy.
    add_custom_target(lmhead_python_files ALL
      COMMAND ${CMAKE_COMMAND} -E copy_if_different ${LMHEAD_PY_SOURCES} ${_pkg}/
      DEPENDS _lmhead ${LMHEAD_PY_SOURCES})
  endif()
endif()

# ---- install -------------------------------------------------------------------------------------
# Everything but the Python module; a wheel installs only the component `python`.
set(LMHEAD_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/lmhead)
set(_lmhead_targets lmhead_core)
if(LMHEAD_SHARED)
  list(APPEND _lmhead_targets lmhead_shared)
endif()
install(TARGETS ${_lmhead_targets} EXPORT lmheadTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT lib NAMELINK_COMPONENT dev
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/lmhead/lmhead.h ${PROJECT_SOURCE_DIR}/include/lmhead/lmhead.hpp
              ${PROJECT_SOURCE_DIR}/include/lmhead/error.hpp ${PROJECT_SOURCE_DIR}/include/lmhead/tensor_type.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lmhead COMPONENT dev)
if(TARGET lmhead)
  install(TARGETS lmhead RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT bin)
endif()
install(EXPORT lmheadTargets NAMESPACE lmhead:: DESTINATION ${LMHEAD_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/lmheadConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/lmheadConfig.cmake INSTALL_DESTINATION ${LMHEAD_CMAKE_DIR})
# 0.x: a minor version may change the API, so only the same minor version is compatible.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/lmheadConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/lmheadConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/lmheadConfigVersion.cmake
        DESTINATION ${LMHEAD_CMAKE_DIR} COMPONENT dev)

# pkg-config: the shared library by default, `pkg-config --static` adds what the archive needs.
set(LMHEAD_PC_LIBS_PRIVATE "-lstdc++ -lm -pthread")
if(LMHEAD_HAVE_CUDA)
  string(APPEND LMHEAD_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lrt")
endif()
if(LMHEAD_HAVE_NCCL)
  string(APPEND LMHEAD_PC_LIBS_PRIVATE " ${NCCL_LIBRARY}")
endif()
# Relocatable: the prefix is found from the .pc file's own place, so `cmake --install --prefix`
# anywhere (or a copied tree) gives a file that points at itself.
file(RELATIVE_PATH LMHEAD_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(${CMAKE_CURRENT_LIST_DIR}/lmhead.pc.in ${CMAKE_CURRENT_BINARY_DIR}/lmhead.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/lmhead.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
