# fsdp_opt_find_torch([HINTS dir...]): find_package(Torch) so that every torch library the
# build links comes from the one torch installation that was found. Used by the top-level
# CMakeLists.txt and by the installed FsdpOptConfig.cmake, so a consumer of the installed
# package gets the same checks.
#
# Why: PyTorch documents building against its wheel with nothing but
#   -DCMAKE_PREFIX_PATH=$(python -c 'import torch; print(torch.utils.cmake_prefix_path)')
# but TorchConfig.cmake then finds some of its libraries with find_library(... PATHS <torch>/lib),
# which searches the system directories first. On a machine that also has Debian's libtorch-dev,
# c10_LIBRARY becomes /usr/lib/x86_64-linux-gnu/libc10.so (1.13): the build links both torches'
# c10 and crashes at run time. And executables linking the wheel's libtorch_cuda.so need its
# NCCL, which the linker looks for in the link's own -rpath directories (the CUDA toolkit's,
# whose libnccl.so.2 is older) before libtorch_cuda.so's RPATH.
#
# What it does:
#   1. the torch installations the configuration names (Torch_DIR, Torch_ROOT, CMAKE_PREFIX_PATH,
#      as variables or environment variables; else the HINTS) must be one: two are an error
#      naming both;
#   2. it sets Torch_ROOT to that installation, so the find_library calls in torch's CMake
#      package search its own library directory before the system's (CMP0074);
#   3. after find_package(Torch), every torch library (libtorch*, libc10*, ...) of the link must
#      sit in the torch target's own directory, else an error names both installations;
#   4. the directories in the RPATH of torch's libraries (the wheel's nvidia/*/lib: its NCCL,
#      CUDA runtime, cuDNN) go to the linker as -rpath-link on those imported targets, so the
#      linker resolves their dependencies where the loader will.
# On failure it sets FSDP_OPT_TORCH_ERROR (one message) and leaves Torch_FOUND false; the caller
# decides how to fail (the project: FATAL_ERROR; the package config: not found).

# The TorchConfig.cmake files reachable from one prefix, in the places find_package's config
# mode looks for a package named Torch (the subset torch installations use).
function(_fsdp_opt_torch_configs_under prefix out)
  set(found)
  set(arch "${CMAKE_LIBRARY_ARCHITECTURE}")
  foreach(rel "" cmake CMake Torch Torch/cmake share/cmake/Torch lib/cmake/Torch
          lib64/cmake/Torch "lib/${arch}/cmake/Torch" share/Torch lib/Torch)
    foreach(name TorchConfig.cmake torch-config.cmake)
      if(EXISTS "${prefix}/${rel}/${name}" AND NOT IS_DIRECTORY "${prefix}/${rel}/${name}")
        get_filename_component(real "${prefix}/${rel}/${name}" REALPATH)
        list(APPEND found "${real}")
      endif()
    endforeach()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# "torch VERSION at DIR" for messages.
function(_fsdp_opt_describe_torch_config config out)
  get_filename_component(dir "${config}" DIRECTORY)
  set(version "of unknown version")
  if(EXISTS "${dir}/TorchConfigVersion.cmake")
    file(STRINGS "${dir}/TorchConfigVersion.cmake" line REGEX "set\\(PACKAGE_VERSION \"")
    string(REGEX REPLACE ".*PACKAGE_VERSION \"([^\"]*)\".*" "\\1" version "${line}")
  endif()
  set(${out} "torch ${version} (${dir})" PARENT_SCOPE)
endfunction()

# The library files `items` (targets and paths) link: each imported target's own file and,
# through INTERFACE_LINK_LIBRARIES, its dependencies' (generator expressions are skipped: torch's
# name its own targets, which are followed by name).
function(_fsdp_opt_link_files out)
  set(files)
  set(seen)
  set(queue ${ARGN})
  while(queue)
    list(POP_FRONT queue item)
    if(TARGET "${item}")
      if("${item}" IN_LIST seen)
        continue()
      endif()
      list(APPEND seen "${item}")
      get_target_property(imported "${item}" IMPORTED)
      if(NOT imported)
        continue()
      endif()
      get_target_property(type "${item}" TYPE)
      if(NOT type STREQUAL "INTERFACE_LIBRARY")
        get_target_property(location "${item}" IMPORTED_LOCATION)
        if(NOT location)
          get_target_property(configs "${item}" IMPORTED_CONFIGURATIONS)
          foreach(config IN LISTS configs)
            get_target_property(location "${item}" IMPORTED_LOCATION_${config})
            if(location)
              break()
            endif()
          endforeach()
        endif()
        if(location)
          list(APPEND files "${location}")
        endif()
      endif()
      get_target_property(deps "${item}" INTERFACE_LINK_LIBRARIES)
      foreach(dep IN LISTS deps)
        if(dep AND NOT dep MATCHES "\\$<")
          list(APPEND queue "${dep}")
        endif()
      endforeach()
    elseif(IS_ABSOLUTE "${item}" AND EXISTS "${item}")
      list(APPEND files "${item}")
    endif()
  endwhile()
  set(${out} "${files}" PARENT_SCOPE)
endfunction()

# Sets FSDP_OPT_TORCH_ERROR when a torch library of TORCH_LIBRARIES lies outside the directory
# of the found package's own libraries; otherwise adds -rpath-link for their RPATH directories.
function(_fsdp_opt_check_torch_link)
  _fsdp_opt_link_files(files ${TORCH_LIBRARIES})
  # The directory of the package's main library: every torch library lives beside it (the
  # wheel's torch/lib, Debian's /usr/lib/<arch>).
  set(reference_target torch_cpu)
  if(NOT TARGET torch_cpu)
    set(reference_target torch)
  endif()
  _fsdp_opt_link_files(reference ${reference_target})
  list(GET reference 0 reference)
  get_filename_component(reference "${reference}" REALPATH)
  get_filename_component(libdir "${reference}" DIRECTORY)
  _fsdp_opt_describe_torch_config("${Torch_DIR}/TorchConfig.cmake" found)
  set(rpath_dirs)
  foreach(file IN LISTS files)
    get_filename_component(name "${file}" NAME)
    if(NOT name MATCHES "^lib(torch|c10|caffe2|shm|kineto)[_.a-z0-9]*\\.(so|a)")
      continue()
    endif()
    get_filename_component(real "${file}" REALPATH)
    get_filename_component(dir "${real}" DIRECTORY)
    if(NOT dir STREQUAL libdir)
      string(CONCAT message
             "two torch installations in one link: the Torch package found is ${found}, whose "
             "libraries are in ${libdir}, but ${file} (${real}) comes from another torch in "
             "${dir}. Name one torch installation only (CMAKE_PREFIX_PATH, Torch_DIR, "
             "Torch_ROOT) and do not set torch's library variables (c10_LIBRARY, TORCH_LIBRARY, "
             "...) to another's.")
      set(FSDP_OPT_TORCH_ERROR "${message}" PARENT_SCOPE)
      return()
    endif()
    if(CMAKE_OBJDUMP AND name MATCHES "\\.so")
      execute_process(COMMAND "${CMAKE_OBJDUMP}" -p "${real}" OUTPUT_VARIABLE dump
                      ERROR_QUIET RESULT_VARIABLE rc)
      if(rc EQUAL 0 AND dump MATCHES "R(UN)?PATH +([^\n]*)")
        string(REPLACE ":" ";" entries "${CMAKE_MATCH_2}")
        foreach(entry IN LISTS entries)
          string(REPLACE "$ORIGIN" "${dir}" entry "${entry}")
          get_filename_component(entry "${entry}" ABSOLUTE)
          if(IS_DIRECTORY "${entry}" AND NOT entry STREQUAL dir AND NOT entry IN_LIST rpath_dirs)
            list(APPEND rpath_dirs "${entry}")
          endif()
        endforeach()
      endif()
    endif()
  endforeach()
  if(rpath_dirs)
    list(JOIN rpath_dirs ":" joined)
    foreach(target torch_cpu torch_cuda torch c10 c10_cuda)
      if(TARGET ${target})
        set_property(TARGET ${target} APPEND PROPERTY INTERFACE_LINK_OPTIONS
                     "LINKER:-rpath-link,${joined}")
      endif()
    endforeach()
  endif()
endfunction()

macro(fsdp_opt_find_torch)
  cmake_parse_arguments(_fsdp_opt_ft "" "" "HINTS" ${ARGN})
  set(FSDP_OPT_TORCH_ERROR "")
  # 1. The installations the configuration names.
  set(_fsdp_opt_named)
  set(_fsdp_opt_prefixes ${CMAKE_PREFIX_PATH} $ENV{CMAKE_PREFIX_PATH})
  string(REPLACE ":" ";" _fsdp_opt_prefixes "${_fsdp_opt_prefixes}")
  foreach(_fsdp_opt_p IN ITEMS ${Torch_ROOT} $ENV{Torch_ROOT} ${_fsdp_opt_prefixes})
    _fsdp_opt_torch_configs_under("${_fsdp_opt_p}" _fsdp_opt_c)
    list(APPEND _fsdp_opt_named ${_fsdp_opt_c})
  endforeach()
  foreach(_fsdp_opt_d IN ITEMS ${Torch_DIR} $ENV{Torch_DIR})
    if(NOT _fsdp_opt_d MATCHES "NOTFOUND$")
      _fsdp_opt_torch_configs_under("${_fsdp_opt_d}" _fsdp_opt_c)
      list(APPEND _fsdp_opt_named ${_fsdp_opt_c})
    endif()
  endforeach()
  if(NOT _fsdp_opt_named)
    foreach(_fsdp_opt_d IN LISTS _fsdp_opt_ft_HINTS)
      _fsdp_opt_torch_configs_under("${_fsdp_opt_d}" _fsdp_opt_c)
      list(APPEND _fsdp_opt_named ${_fsdp_opt_c})
    endforeach()
  endif()
  list(REMOVE_DUPLICATES _fsdp_opt_named)
  list(LENGTH _fsdp_opt_named _fsdp_opt_n)
  if(_fsdp_opt_n GREATER 1)
    list(GET _fsdp_opt_named 0 _fsdp_opt_a)
    list(GET _fsdp_opt_named 1 _fsdp_opt_b)
    _fsdp_opt_describe_torch_config("${_fsdp_opt_a}" _fsdp_opt_a)
    _fsdp_opt_describe_torch_config("${_fsdp_opt_b}" _fsdp_opt_b)
    string(CONCAT FSDP_OPT_TORCH_ERROR
           "the configuration names two torch installations, ${_fsdp_opt_a} and "
           "${_fsdp_opt_b} (CMAKE_PREFIX_PATH, Torch_DIR, Torch_ROOT); a build links one torch: "
           "name only it")
    set(Torch_FOUND FALSE)
  else()
    # 2. Its own library directory first for torch's find_library calls.
    if(_fsdp_opt_n EQUAL 1 AND NOT DEFINED Torch_ROOT)
      get_filename_component(_fsdp_opt_cfgdir "${_fsdp_opt_named}" DIRECTORY)
      # <root>/share/cmake/Torch (the wheel, libtorch) or <root>/lib/<arch>/cmake/Torch: the
      # root is where TorchConfig.cmake itself takes its TORCH_INSTALL_PREFIX from.
      if(_fsdp_opt_cfgdir MATCHES "/share/cmake/Torch$")
        get_filename_component(Torch_ROOT "${_fsdp_opt_cfgdir}/../../.." ABSOLUTE)
      else()
        get_filename_component(Torch_ROOT "${_fsdp_opt_cfgdir}/../../../.." ABSOLUTE)
      endif()
    endif()
    if(_fsdp_opt_ft_HINTS)
      find_package(Torch ${_fsdp_opt_ft_UNPARSED_ARGUMENTS} HINTS ${_fsdp_opt_ft_HINTS})
    else()
      find_package(Torch ${_fsdp_opt_ft_UNPARSED_ARGUMENTS})
    endif()
    # 3. and 4.
    if(Torch_FOUND)
      _fsdp_opt_check_torch_link()
      if(FSDP_OPT_TORCH_ERROR)
        set(Torch_FOUND FALSE)
      endif()
    endif()
  endif()
endmacro()

# fsdp_opt_link_torch_cpu(TARGET): TARGET compiles as the torch target asks (its include
# directories, compile features, definitions and options: torch 2.x needs C++20) but links
# torch's CPU libraries only (torch_cpu_library: libtorch_cpu and libc10), not libtorch.so, which
# on a CUDA build of torch loads libtorch_cuda, cuBLAS(Lt), cuDNN and NCCL: some 300 MiB of
# resident memory in every process, before it does anything (docs/benchmarks.md, section 7).
# What needs CUDA links it itself: fsdp-run and the GPU tests link TORCH_LIBRARIES, and
# libfsdp_runtime_cuda is loaded at the first CUDA gather. Programs built against the installed
# package still get the whole of TORCH_LIBRARIES from TARGET's exported interface, as before.
# Both supported torches (1.13, 2.15) define torch_cpu_library.
function(fsdp_opt_link_torch_cpu target)
  get_target_property(includes torch INTERFACE_INCLUDE_DIRECTORIES)
  get_target_property(features torch INTERFACE_COMPILE_FEATURES)
  get_target_property(definitions torch INTERFACE_COMPILE_DEFINITIONS)
  get_target_property(options torch INTERFACE_COMPILE_OPTIONS)
  if(includes)
    # SYSTEM, as an imported target's are: no warnings from torch's headers.
    target_include_directories(${target} SYSTEM PUBLIC "$<BUILD_INTERFACE:${includes}>")
  endif()
  if(features)
    target_compile_features(${target} PUBLIC ${features})
  endif()
  if(definitions)
    target_compile_definitions(${target} PUBLIC "$<BUILD_INTERFACE:${definitions}>")
  endif()
  if(options)
    target_compile_options(${target} PUBLIC "$<BUILD_INTERFACE:${options}>")
  endif()
  target_link_libraries(${target} PUBLIC "$<BUILD_INTERFACE:torch_cpu_library>"
                                         "$<INSTALL_INTERFACE:${TORCH_LIBRARIES}>")
endfunction()
