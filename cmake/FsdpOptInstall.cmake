# `cmake --install BUILD [--prefix PREFIX]`: headers, libraries, tools and the CMake package
#   PREFIX/include/fsdp_opt/*.h
#   PREFIX/lib/libfsdp_passes.so, libfsdp_runtime.so (and libfsdp_runtime_cuda.so, which
#   libfsdp_runtime loads from its own directory, in a CUDA build)
#   PREFIX/bin/fsdp-opt, fsdp-run
#   PREFIX/lib/cmake/FsdpOpt/FsdpOptConfig.cmake (+ ConfigVersion, Targets, and FsdpOptTorch.cmake,
#   which finds Torch with the checks of the build): find_package(FsdpOpt)
# Included from the top-level CMakeLists.txt after every target is defined.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(FSDP_OPT_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/FsdpOpt")

# Installed binaries find our libraries beside them (lib/ from bin/), and torch's libraries in
# the directories they were linked from (a venv's torch/lib is not on the loader's path).
set(FSDP_OPT_INSTALLED_LIBRARIES fsdp_runtime fsdp_passes)
if(TARGET fsdp_runtime_cuda)
  list(APPEND FSDP_OPT_INSTALLED_LIBRARIES fsdp_runtime_cuda)
endif()
set_target_properties(${FSDP_OPT_INSTALLED_LIBRARIES} PROPERTIES
  INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH TRUE)
set_target_properties(fsdp-opt fsdp-run PROPERTIES
  INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}" INSTALL_RPATH_USE_LINK_PATH TRUE)

install(TARGETS ${FSDP_OPT_INSTALLED_LIBRARIES} fsdp-opt fsdp-run
  EXPORT FsdpOptTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/fsdp_opt
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(EXPORT FsdpOptTargets NAMESPACE FsdpOpt:: DESTINATION ${FSDP_OPT_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/FsdpOptConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/FsdpOptConfig.cmake
  INSTALL_DESTINATION ${FSDP_OPT_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
# 0.x: a minor version may change the C++ API.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/FsdpOptConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/FsdpOptConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/FsdpOptConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/FsdpOptTorch.cmake
  DESTINATION ${FSDP_OPT_INSTALL_CMAKEDIR})
