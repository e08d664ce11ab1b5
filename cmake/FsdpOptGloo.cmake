# fsdp_opt_add_gloo_backend(TARGET): adds the CPU backend for W > 1 (runtime/gloo_backend.cpp)
# to TARGET, or its stub (runtime/gloo_backend_stub.cpp: CPU tensors at world size 1 only).
#
# ProcessGroupGloo.hpp includes gloo's headers. Debian's libtorch-dev ships them (libgloo-dev, in
# /usr/include). The PyPI wheel links gloo statically into libtorch_cpu but ships no gloo headers,
# so there gloo_backend.cpp is compiled against another copy of gloo's headers (Debian's by
# default). That is sound only because gloo_backend.cpp touches gloo types through c10d's exported
# functions and shared_ptr alone (docs/runtime.md, "Gloo on the PyPI wheel"); a check after the
# link (runtime/check_no_gloo_symbols.cmake) keeps it that way.
#
# Options: FSDP_OPT_BUILD_GLOO (OFF: the stub, whatever headers exist; test/gpu/standalone builds
# that way everywhere, so CI compiles exactly what a GPU machine without gloo headers does),
# FSDP_OPT_REQUIRE_GLOO (OFF: no headers found means the stub and a warning, not an error),
# FSDP_OPT_GLOO_INCLUDE_DIR (the directory holding gloo/ when torch ships none).
option(FSDP_OPT_REQUIRE_GLOO "Fail when no gloo headers are found (OFF: build without the CPU backend for W > 1)" ON)
option(FSDP_OPT_BUILD_GLOO "Build the gloo backend (OFF: a stub; CPU tensors at world size 1 only)" ON)

function(fsdp_opt_add_gloo_backend target)
  set(sources "${CMAKE_CURRENT_SOURCE_DIR}")  # runtime/: its CMakeLists.txt calls this
  set(torch_has_gloo OFF)
  foreach(dir IN LISTS TORCH_INCLUDE_DIRS)
    if(EXISTS "${dir}/gloo/context.h")
      set(torch_has_gloo ON)
    endif()
  endforeach()
  set(stub OFF)
  if(NOT FSDP_OPT_BUILD_GLOO)
    set(stub ON)
  elseif(NOT torch_has_gloo)
    find_path(FSDP_OPT_GLOO_INCLUDE_DIR gloo/context.h
              DOC "Directory holding gloo/ headers, used when the torch package ships none")
    if(NOT FSDP_OPT_GLOO_INCLUDE_DIR AND NOT FSDP_OPT_REQUIRE_GLOO)
      message(WARNING "fsdp-opt: no gloo headers: building without the gloo backend (CPU tensors "
                      "at world size 1 only)")
      set(stub ON)
    elseif(NOT FSDP_OPT_GLOO_INCLUDE_DIR)
      message(FATAL_ERROR "fsdp-opt: torch at ${Torch_DIR} ships no gloo headers and none were "
                          "found; install libgloo-dev or set FSDP_OPT_GLOO_INCLUDE_DIR")
    endif()
  endif()
  if(stub)
    target_sources(${target} PRIVATE "${sources}/gloo_backend_stub.cpp")
    return()
  endif()
  target_sources(${target} PRIVATE "${sources}/gloo_backend.cpp")
  if(torch_has_gloo)
    return()
  endif()
  set(version "unknown")
  if(EXISTS "${FSDP_OPT_GLOO_INCLUDE_DIR}/gloo/config.h")
    file(STRINGS "${FSDP_OPT_GLOO_INCLUDE_DIR}/gloo/config.h" v REGEX "#define GLOO_VERSION_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE "[^0-9;]" "" v "${v}")
    string(REPLACE ";" "." version "${v}")
  endif()
  message(STATUS "fsdp-opt: torch ships no gloo headers; gloo_backend.cpp uses gloo ${version} "
                 "headers from ${FSDP_OPT_GLOO_INCLUDE_DIR} (declarations only; gloo code comes "
                 "from libtorch_cpu)")
  # Expose only gloo/ from that directory (a symlink farm), never its other headers: /usr/include
  # also holds Debian's torch 1.13 headers, which must not shadow the wheel's.
  set(shim "${CMAKE_CURRENT_BINARY_DIR}/gloo-include")
  file(MAKE_DIRECTORY "${shim}")
  file(CREATE_LINK "${FSDP_OPT_GLOO_INCLUDE_DIR}/gloo" "${shim}/gloo" SYMBOLIC)
  set_property(SOURCE "${sources}/gloo_backend.cpp" APPEND PROPERTY INCLUDE_DIRECTORIES "${shim}")
  # The library must not call into gloo directly (only through c10d), since the headers it was
  # compiled against are not the ones libtorch_cpu's gloo was built from.
  find_program(FSDP_OPT_NM nm)
  if(FSDP_OPT_NM)
    add_custom_command(TARGET ${target} POST_BUILD
      COMMAND ${CMAKE_COMMAND} -DNM=${FSDP_OPT_NM} -DLIB=$<TARGET_FILE:${target}>
              -P "${sources}/check_no_gloo_symbols.cmake"
      VERBATIM)
  endif()
endfunction()
