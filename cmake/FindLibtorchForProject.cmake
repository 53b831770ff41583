# libtorch discovery, in order:
#   1. LIBTORCH_DIR (a libtorch root or its share/cmake/Torch) or Torch_DIR,
#   2. the torch of the python3 on PATH when it is a ROCm or CUDA build,
#   3. the system's (Debian's libtorch-dev).
set(_rcl_torch_source "system")
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
else()
  find_program(_rcl_python3 python3)
  if(_rcl_python3)
    execute_process(
      COMMAND ${_rcl_python3} -c "import torch,torch.utils;print(torch.utils.cmake_prefix_path);print('rocm' if torch.version.hip else ('cuda' if torch.version.cuda else 'cpu'))"
      OUTPUT_VARIABLE _rcl_py_out RESULT_VARIABLE _rcl_py_rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(_rcl_py_rc EQUAL 0)
      string(REPLACE "\n" ";" _rcl_py_lines "${_rcl_py_out}")
      list(GET _rcl_py_lines 0 _rcl_py_prefix)
      list(GET _rcl_py_lines 1 _rcl_py_kind)
      if(NOT _rcl_py_kind STREQUAL "cpu")
        list(PREPEND CMAKE_PREFIX_PATH "${_rcl_py_prefix}")
        set(_rcl_torch_source "${_rcl_python3} torch (${_rcl_py_kind}, ${_rcl_py_prefix})")
        if(_rcl_py_kind STREQUAL "rocm")
          # The ROCm wheel's TorchConfig loads HIP's CMake packages.
          list(APPEND CMAKE_PREFIX_PATH "$ENV{ROCM_PATH}" /opt/rocm)
        endif()
      endif()
    endif()
  endif()
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
message(STATUS "libtorch: ${Torch_VERSION} from ${_rcl_torch_source}; build kind: ${RCL_TORCH_BUILD}; libs in ${_rcl_torch_libdir}")
