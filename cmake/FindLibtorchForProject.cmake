# libtorch discovery, in order:
#   1. LIBTORCH_DIR (a libtorch root or its share/cmake/Torch) or Torch_DIR,
#   2. the torch of the python3 on PATH when it is a ROCm or CUDA build,
#   3. the system's (Debian's libtorch-dev).
set(_rcl_torch_source "system")

# A CUDA wheel's Caffe2 config runs enable_language(CUDA) and find_package(CUDAToolkit): without
# a compiler it stops, and with a toolkit of another major version it fails later on "two
# conflicting CUDA versions". Point both at the toolkit (CUDA_HOME, CUDA_PATH, /usr/local/cuda)
# and refuse a major version different from the wheel's, at configure time.
function(rcl_use_matching_cuda_toolkit wheel_cuda)
  find_program(_rcl_nvcc nvcc HINTS "$ENV{CUDA_HOME}/bin" "$ENV{CUDA_PATH}/bin" /usr/local/cuda/bin)
  if(NOT _rcl_nvcc)
    message(FATAL_ERROR "libtorch is a CUDA ${wheel_cuda} build but no nvcc was found: set CUDA_HOME to its toolkit")
  endif()
  execute_process(COMMAND ${_rcl_nvcc} --version OUTPUT_VARIABLE _rcl_nvcc_out ERROR_QUIET)
  string(REGEX MATCH "release ([0-9]+)\\.([0-9]+)" _rcl_nvcc_release "${_rcl_nvcc_out}")
  set(toolkit_version "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
  set(toolkit_major "${CMAKE_MATCH_1}")
  string(REGEX MATCH "^[0-9]+" wheel_major "${wheel_cuda}")
  if(NOT toolkit_major STREQUAL wheel_major)
    message(FATAL_ERROR "libtorch is a CUDA ${wheel_cuda} build but ${_rcl_nvcc} is CUDA "
                        "${toolkit_version}: set CUDA_HOME to a CUDA ${wheel_major}.x toolkit")
  endif()
  get_filename_component(toolkit_root "${_rcl_nvcc}" DIRECTORY)
  get_filename_component(toolkit_root "${toolkit_root}" DIRECTORY)
  set(CMAKE_CUDA_COMPILER "${_rcl_nvcc}" CACHE FILEPATH "nvcc matching the libtorch wheel" FORCE)
  set(CUDAToolkit_ROOT "${toolkit_root}" CACHE PATH "CUDA toolkit matching the libtorch wheel" FORCE)
  message(STATUS "CUDA toolkit ${toolkit_version} at ${toolkit_root} (wheel: CUDA ${wheel_cuda})")
endfunction()
if(NOT Torch_DIR AND DEFINED ENV{Torch_DIR})
  set(Torch_DIR "$ENV{Torch_DIR}")
endif()
if(NOT Torch_DIR AND DEFINED ENV{LIBTORCH_DIR})
  if(EXISTS "$ENV{LIBTORCH_DIR}/share/cmake/Torch/TorchConfig.cmake")
    set(Torch_DIR "$ENV{LIBTORCH_DIR}/share/cmake/Torch")
  else()
    set(Torch_DIR "$ENV{LIBTORCH_DIR}")
  endif()
endif()
if(Torch_DIR)
  set(_rcl_torch_source "Torch_DIR/LIBTORCH_DIR (${Torch_DIR})")
  get_filename_component(_rcl_dir_libdir "${Torch_DIR}/../../../lib" ABSOLUTE)
  list(PREPEND CMAKE_LIBRARY_PATH "${_rcl_dir_libdir}")  # before a system libtorch, as below
else()
  find_program(_rcl_python3 python3)
  if(_rcl_python3)
    execute_process(
      COMMAND ${_rcl_python3} -c "import torch,torch.utils;print(torch.utils.cmake_prefix_path);print('rocm' if torch.version.hip else ('cuda' if torch.version.cuda else 'cpu'));print(torch.version.cuda or '')"
      OUTPUT_VARIABLE _rcl_py_out RESULT_VARIABLE _rcl_py_rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(_rcl_py_rc EQUAL 0)
      string(REPLACE "\n" ";" _rcl_py_lines "${_rcl_py_out}")
      list(GET _rcl_py_lines 0 _rcl_py_prefix)
      list(GET _rcl_py_lines 1 _rcl_py_kind)
      list(LENGTH _rcl_py_lines _rcl_py_count)
      set(_rcl_py_cuda "")
      if(_rcl_py_count GREATER 2)
        list(GET _rcl_py_lines 2 _rcl_py_cuda)
      endif()
      if(NOT _rcl_py_kind STREQUAL "cpu")
        list(PREPEND CMAKE_PREFIX_PATH "${_rcl_py_prefix}")
        # TorchConfig looks for libtorch.so in the system's folders before its own: where the
        # system has a libtorch too (Debian's, in CI), the wheel's must come first.
        get_filename_component(_rcl_py_libdir "${_rcl_py_prefix}/../../lib" ABSOLUTE)
        list(PREPEND CMAKE_LIBRARY_PATH "${_rcl_py_libdir}")
        set(_rcl_torch_source "${_rcl_python3} torch (${_rcl_py_kind}, ${_rcl_py_prefix})")
        if(_rcl_py_kind STREQUAL "rocm")
          # The ROCm wheel's TorchConfig loads HIP's CMake packages.
          list(APPEND CMAKE_PREFIX_PATH "$ENV{ROCM_PATH}" /opt/rocm)
        elseif(_rcl_py_kind STREQUAL "cuda")
          rcl_use_matching_cuda_toolkit("${_rcl_py_cuda}")
        endif()
      endif()
    endif()
  endif()
endif()

# A CUDA libtorch's config enables CUDA, though the project compiles no CUDA code: its checks only
# need to pass, also on a re-run where Torch_DIR is cached. CMake < 3.28 has no nvcc flag for the
# C++20 the CUDA standard would follow, and without an architecture list the config runs a program
# on the GPU to find one (there may be none: CI builds here). Unused by CPU and ROCm builds.
if(NOT DEFINED CMAKE_CUDA_STANDARD)
  set(CMAKE_CUDA_STANDARD 17)
endif()
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(ENV{TORCH_CUDA_ARCH_LIST} "8.0;9.0")
endif()
find_package(Torch REQUIRED)

# Build kind from the libraries the found libtorch ships.
get_filename_component(_rcl_torch_libdir "${TORCH_LIBRARY}" DIRECTORY)
if(EXISTS "${_rcl_torch_libdir}/libtorch_hip.so" OR TARGET c10_hip)
  set(RCL_TORCH_BUILD "rocm")
elseif(EXISTS "${_rcl_torch_libdir}/libtorch_cuda.so" OR TARGET c10_cuda)
  set(RCL_TORCH_BUILD "cuda")
else()
  set(RCL_TORCH_BUILD "cpu")
endif()
# The build records the torch it was made with: a build carried to the GPU machine runs only
# against the same python torch there (scripts/gpu/use_carried.sh compares this file with its
# torch.__version__). A wheel's libtorch lies inside the python package, whose version.py has the
# full version (2.11.0+cu130); elsewhere CMake's Torch_VERSION.
set(_rcl_torch_version "${Torch_VERSION}")
if(EXISTS "${TORCH_INSTALL_PREFIX}/version.py")
  file(STRINGS "${TORCH_INSTALL_PREFIX}/version.py" _rcl_version_line REGEX "^__version__ *=")
  string(REGEX REPLACE "^__version__ *= *['\"]([^'\"]+)['\"].*" "\\1" _rcl_torch_version "${_rcl_version_line}")
endif()
file(WRITE "${CMAKE_BINARY_DIR}/libtorch-version.txt" "${_rcl_torch_version}\n")
message(STATUS "libtorch: ${Torch_VERSION} from ${_rcl_torch_source}; build kind: ${RCL_TORCH_BUILD}; libs in ${_rcl_torch_libdir}")
