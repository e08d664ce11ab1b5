# What `pip install .` (scikit-build-core, the root pyproject.toml) adds to the configuration:
# the torch of the environment pip installs into, its CUDA or not, and the layout of the wheel.
# Included by the top-level CMakeLists.txt, which calls these only when SKBUILD is set (a CMake
# build of a developer, scripts/build.sh, names its torch with CMAKE_PREFIX_PATH instead), and
# fsdp_opt_refuse for every build.
#
# fsdp_opt_pip_environment_torch(): runs the interpreter pip runs (Python_EXECUTABLE, which
# scikit-build-core passes) to ask for torch's version, its CMake prefix path and its CUDA
# version, and then
#   - refuses, with one `fsdp-opt:` line naming what is missing and what is supported, when
#     there is no torch, or a torch outside FSDP_OPT_PIP_TORCH_VERSIONS;
#   - puts that torch's cmake_prefix_path on CMAKE_PREFIX_PATH (never a torch of the build
#     environment: the pyproject does not require one, so none is downloaded); Debian's torch
#     1.13, which has none, is found where libtorch-dev puts its CMake package;
#   - turns the CUDA/NCCL backend on when that torch is a CUDA build and nvcc is found, and
#     otherwise says, in the build output and in fsdp_opt.build_info(), that the CPU build is
#     made and why;
#   - sets FSDP_OPT_PYTHON to that interpreter.
# Why the second try without the environment: under pip's build isolation the interpreter runs
# with PYTHONPATH set to a sitecustomize that hides the environment's own site-packages; `-E -s`
# ignores it (and the user site), which is the environment as the user sees it.

# One `error: fsdp-opt: ...` line as written (FATAL_ERROR's own text is re-wrapped by CMake, and
# pip shows the build's output only when it fails), then the stop. The pieces are concatenated:
# a ';' in them would split them as a list.
macro(fsdp_opt_refuse)
  string(CONCAT _fsdp_opt_refusal ${ARGN})
  message(NOTICE "error: fsdp-opt: ${_fsdp_opt_refusal}")
  message(FATAL_ERROR "fsdp-opt: stopped; the `error: fsdp-opt:` line above says why")
endmacro()

# The torch releases the wheel builds against: those the two test legs run (README, "Supported
# versions"; scripts/install-deps.sh pins the t2 leg's, TORCH_MIN/TORCH_BELOW).
set(FSDP_OPT_PIP_TORCH_VERSIONS "2.15;1.13")

function(_fsdp_opt_query_torch python out_result out_lines)
  set(script "import torch, torch.utils; print(torch.__version__); print(torch.utils.cmake_prefix_path); print(torch.version.cuda or '')")
  foreach(flags IN ITEMS "" "-E;-s")
    execute_process(COMMAND "${python}" ${flags} -c "${script}"
                    RESULT_VARIABLE rc OUTPUT_VARIABLE lines ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(rc EQUAL 0)
      string(REPLACE "\n" ";" lines "${lines}")
      set(${out_result} 0 PARENT_SCOPE)
      set(${out_lines} "${lines}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out_result} 1 PARENT_SCOPE)
endfunction()

macro(fsdp_opt_pip_environment_torch)
  if(NOT Python_EXECUTABLE)
    fsdp_opt_refuse("scikit-build-core passed no Python_EXECUTABLE; cannot tell which torch to build against")
  endif()
  string(REPLACE ";" ".x or " _fsdp_opt_supported "${FSDP_OPT_PIP_TORCH_VERSIONS}")
  _fsdp_opt_query_torch("${Python_EXECUTABLE}" _fsdp_opt_rc _fsdp_opt_torch)
  if(NOT _fsdp_opt_rc EQUAL 0)
    fsdp_opt_refuse("no torch in the environment of ${Python_EXECUTABLE}: install "
                    "torch ${_fsdp_opt_supported}.x first (pip install 'torch>=2.15,<2.16'): fsdp-opt "
                    "builds against the torch already there and never downloads one")
  endif()
  list(GET _fsdp_opt_torch 0 FSDP_OPT_PIP_TORCH_VERSION)
  list(GET _fsdp_opt_torch 1 _fsdp_opt_torch_prefix)
  list(LENGTH _fsdp_opt_torch _fsdp_opt_n)
  set(FSDP_OPT_PIP_TORCH_CUDA "")
  if(_fsdp_opt_n GREATER 2)
    list(GET _fsdp_opt_torch 2 FSDP_OPT_PIP_TORCH_CUDA)
  endif()
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _fsdp_opt_minor "${FSDP_OPT_PIP_TORCH_VERSION}")
  if(NOT _fsdp_opt_minor IN_LIST FSDP_OPT_PIP_TORCH_VERSIONS)
    fsdp_opt_refuse("torch ${FSDP_OPT_PIP_TORCH_VERSION} (of ${Python_EXECUTABLE}) is "
                    "not supported: fsdp-opt builds against torch ${_fsdp_opt_supported}.x "
                    "(README, \"Supported versions\")")
  endif()
  # Debian's python3-torch names a cmake_prefix_path it does not ship; its CMake package
  # (libtorch-dev) is in the system's default search path.
  if(IS_DIRECTORY "${_fsdp_opt_torch_prefix}")
    list(PREPEND CMAKE_PREFIX_PATH "${_fsdp_opt_torch_prefix}")
  endif()
  set(FSDP_OPT_PYTHON "${Python_EXECUTABLE}" CACHE STRING "" FORCE)

  # The CUDA backend: asked for (-C cmake.define.FSDP_OPT_ENABLE_CUDA=ON/OFF), or chosen here.
  if(NOT DEFINED CACHE{FSDP_OPT_ENABLE_CUDA})
    if(NOT FSDP_OPT_PIP_TORCH_CUDA)
      set(_fsdp_opt_cuda OFF)
      set(FSDP_OPT_CUDA_CHOICE "CPU build: torch ${FSDP_OPT_PIP_TORCH_VERSION} has no CUDA")
    else()
      find_program(FSDP_OPT_NVCC nvcc HINTS ENV CUDACXX ENV CUDA_HOME PATH_SUFFIXES bin PATHS /usr/local/cuda/bin)
      if(NOT FSDP_OPT_NVCC)
        # torch's own CMake package needs the toolkit for a CUDA build of torch: no CPU build
        # can be made against it either.
        fsdp_opt_refuse("torch ${FSDP_OPT_PIP_TORCH_VERSION} is a CUDA ${FSDP_OPT_PIP_TORCH_CUDA} "
                        "build, and building against it needs the CUDA toolkit (nvcc), which was "
                        "not found (PATH, CUDACXX, CUDA_HOME, /usr/local/cuda): install it, or use a "
                        "CPU build of torch")
      endif()
      set(_fsdp_opt_cuda ON)
      set(FSDP_OPT_CUDA_CHOICE "CUDA/NCCL backend: torch ${FSDP_OPT_PIP_TORCH_VERSION} (CUDA ${FSDP_OPT_PIP_TORCH_CUDA}), nvcc ${FSDP_OPT_NVCC}")
    endif()
    set(FSDP_OPT_ENABLE_CUDA ${_fsdp_opt_cuda} CACHE BOOL "Build the CUDA/NCCL runtime backend")
  elseif(FSDP_OPT_ENABLE_CUDA)
    set(FSDP_OPT_CUDA_CHOICE "CUDA/NCCL backend: asked for (FSDP_OPT_ENABLE_CUDA=ON)")
  else()
    set(FSDP_OPT_CUDA_CHOICE "CPU build: asked for (FSDP_OPT_ENABLE_CUDA=OFF)")
  endif()
  # One line either way (a WARNING's text is re-wrapped); `pip install -v` shows it.
  if(FSDP_OPT_ENABLE_CUDA)
    message(STATUS "fsdp-opt: ${FSDP_OPT_CUDA_CHOICE}")
  else()
    message(STATUS "fsdp-opt: ${FSDP_OPT_CUDA_CHOICE}; only the Gloo (CPU) runtime is built")
  endif()
endmacro()

# The wheel's layout (install-dir "fsdp_opt": every install() below lands in the package):
#   fsdp_opt/lib/libfsdp_{passes,runtime}.so   found by fsdp_opt.load() with no variable
#   fsdp_opt/bin/fsdp-{opt,run}                 run by the console scripts of the same names
#   fsdp_opt/include/, fsdp_opt/lib/cmake/FsdpOpt/   find_package(FsdpOpt) with
#                                               CMAKE_PREFIX_PATH=fsdp_opt.cmake_prefix_path
#   fsdp_opt/_build_info.py                     fsdp_opt.build_info()
# The libraries find torch's beside the package (site-packages/torch/lib) first, then where
# they were linked from.
function(fsdp_opt_pip_install_layout)
  # fsdp_opt/lib and fsdp_opt/bin are both two levels below site-packages.
  set_property(TARGET ${FSDP_OPT_INSTALLED_LIBRARIES} fsdp-opt fsdp-run APPEND PROPERTY INSTALL_RPATH "$ORIGIN/../../torch/lib")
  configure_file(${CMAKE_CURRENT_FUNCTION_LIST_DIR}/build_info.py.in ${CMAKE_BINARY_DIR}/_build_info.py @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/_build_info.py DESTINATION .)
endfunction()
