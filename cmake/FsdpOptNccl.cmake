# fsdp_opt_find_cuda_backend(): what the CUDA/NCCL backend (FSDP_OPT_ENABLE_CUDA) builds with.
# Needs a CUDA-enabled torch 2.x (torch_cuda, c10::cuda streams and caching allocator), nvcc for
# the copy kernel (runtime/cuda/copy_kernels.cu, torch-free) and NCCL. Which NCCL: by default the
# one next to the torch package (the nvidia-nccl wheel; libtorch_cuda.so already loads it through
# its RPATH, and a process can hold only one libnccl.so.2), else the CUDA toolkit's or the
# system's; FSDP_OPT_NCCL_ROOT overrides. docs/runtime.md, "CUDA: building".
#
# Enables the CUDA language and sets, in the cache: FSDP_OPT_NCCL_INCLUDE_DIR,
# FSDP_OPT_NCCL_LIBRARY, FSDP_OPT_CUDA_ARCHITECTURES, FSDP_OPT_CUDA_FLAGS. Anything missing is a
# FATAL_ERROR naming it.
macro(fsdp_opt_find_cuda_backend)
  if(NOT TARGET torch_cuda)
    message(FATAL_ERROR "fsdp-opt: FSDP_OPT_ENABLE_CUDA=ON needs a CUDA-enabled torch (the "
                        "torch_cuda target); torch ${Torch_VERSION} at ${Torch_DIR} has none")
  endif()
  if(NOT CMAKE_CUDA_COMPILER)
    include(CheckLanguage)
    check_language(CUDA)
    if(NOT CMAKE_CUDA_COMPILER)
      message(FATAL_ERROR "fsdp-opt: FSDP_OPT_ENABLE_CUDA=ON needs nvcc (set CUDACXX or put it on PATH)")
    endif()
    enable_language(CUDA)
  endif()
  set(FSDP_OPT_CUDA_ARCHITECTURES "80-real;90-real;100-real;120-real;120-virtual" CACHE STRING
      "CUDA architectures of the runtime's copy kernel (CMake CUDA_ARCHITECTURES syntax)")
  set(FSDP_OPT_CUDA_FLAGS "" CACHE STRING "nvcc flags for the runtime's copy kernel")
  if(CCACHE_PROGRAM)
    set(CMAKE_CUDA_COMPILER_LAUNCHER "${CCACHE_PROGRAM}")
  endif()
  _fsdp_opt_find_nccl()
endmacro()

function(_fsdp_opt_find_nccl)
  # The torch package's site-packages/nvidia/nccl first.
  set(FSDP_OPT_NCCL_ROOT "" CACHE PATH "NCCL install (include/nccl.h, lib/libnccl.so*) to use")
  set(hints)
  if(FSDP_OPT_NCCL_ROOT)
    list(APPEND hints "${FSDP_OPT_NCCL_ROOT}")
  endif()
  foreach(dir IN LISTS TORCH_INCLUDE_DIRS)
    get_filename_component(site "${dir}/../.." ABSOLUTE)  # <site-packages>/torch/include -> <site-packages>
    list(APPEND hints "${site}/nvidia/nccl")
  endforeach()
  list(APPEND hints "${CUDAToolkit_LIBRARY_ROOT}" "${CUDAToolkit_ROOT}" /usr/local/cuda)
  find_path(FSDP_OPT_NCCL_INCLUDE_DIR nccl.h HINTS ${hints} PATH_SUFFIXES include NO_DEFAULT_PATH)
  find_path(FSDP_OPT_NCCL_INCLUDE_DIR nccl.h)
  # NAMES_PER_DIR: the wheel ships only libnccl.so.2 (no libnccl.so), and its directory must win
  # over a later one that has the unversioned name.
  find_library(FSDP_OPT_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${hints}
               PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
  find_library(FSDP_OPT_NCCL_LIBRARY NAMES nccl libnccl.so.2)
  if(NOT FSDP_OPT_NCCL_INCLUDE_DIR OR NOT FSDP_OPT_NCCL_LIBRARY)
    message(FATAL_ERROR "fsdp-opt: FSDP_OPT_ENABLE_CUDA=ON but NCCL was not found (looked in "
                        "${hints}); set FSDP_OPT_NCCL_ROOT")
  endif()
  file(STRINGS "${FSDP_OPT_NCCL_INCLUDE_DIR}/nccl.h" v REGEX "#define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE "[^0-9;]" "" v "${v}")
  string(REPLACE ";" "." v "${v}")
  message(STATUS "fsdp-opt: CUDA runtime backend ON: nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
                 "kernel architectures ${FSDP_OPT_CUDA_ARCHITECTURES}, NCCL ${v} "
                 "(${FSDP_OPT_NCCL_LIBRARY})")
endfunction()
