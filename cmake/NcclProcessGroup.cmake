# c10d's NCCL process group (what torch.distributed calls "nccl"), chosen by capability: wherever
# the found libtorch has it (RCCL in a ROCm build, NCCL in a CUDA one, one C++ API), the group's
# file is compiled and RCL_HAVE_C10D_NCCL defined; elsewhere (CPU builds such as Debian's 1.13)
# collectives of device tensors go through Gloo. Included after rcl_core is defined.
# Capability: the group's header ships with libtorch, and its GPU library (libtorch_cuda.so or
# libtorch_hip.so, where c10d's NCCL code lives) exports ProcessGroupNCCL. Its dynamic symbol names
# come early in the file, so the scan stops within the first megabytes.
set(RCL_HAVE_C10D_NCCL OFF)
set(_rcl_nccl_header OFF)
foreach(_rcl_dir ${TORCH_INCLUDE_DIRS})
  if(EXISTS "${_rcl_dir}/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp")
    set(_rcl_nccl_header ON)
  endif()
endforeach()
foreach(_rcl_gpu_lib libtorch_cuda.so libtorch_hip.so)
  if(_rcl_nccl_header AND EXISTS "${_rcl_torch_libdir}/${_rcl_gpu_lib}")
    file(STRINGS "${_rcl_torch_libdir}/${_rcl_gpu_lib}" _rcl_nccl_symbol REGEX "ProcessGroupNCCL" LIMIT_COUNT 1)
    if(_rcl_nccl_symbol)
      set(RCL_HAVE_C10D_NCCL ON)
    endif()
  endif()
endforeach()

set(_rcl_nccl_source ${CMAKE_CURRENT_SOURCE_DIR}/rocm_conformance_llm/transport/process_group_nccl.cpp)
if(RCL_HAVE_C10D_NCCL)
  target_sources(rcl_core PRIVATE ${_rcl_nccl_source})
  # Alone: the only file that includes c10d's NCCL group (and, on ROCm, HIP's headers).
  set_source_files_properties(${_rcl_nccl_source} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  # PUBLIC: the tests check which backend a GPU device gets.
  target_compile_definitions(rcl_core PUBLIC RCL_HAVE_C10D_NCCL=1)
  if(RCL_TORCH_BUILD STREQUAL "rocm")
    # The ROCm-specific part, all of it: a ROCm libtorch's c10d headers are hipified (they include
    # HIP's and RCCL's headers), so this one file builds with the HIP host flags and RCCL's include
    # folder, outside the precompiled header made without them. The rest stays device-agnostic.
    find_package(hip CONFIG REQUIRED PATHS $ENV{ROCM_PATH} /opt/rocm)
    find_path(RCL_RCCL_INCLUDE rccl/rccl.h PATHS $ENV{ROCM_PATH}/include /opt/rocm/include)
    set_source_files_properties(${_rcl_nccl_source} PROPERTIES
      COMPILE_DEFINITIONS "__HIP_PLATFORM_AMD__=1"
      SKIP_PRECOMPILE_HEADERS ON)
    target_link_libraries(rcl_core PRIVATE hip::host)
    if(RCL_RCCL_INCLUDE)
      target_include_directories(rcl_core SYSTEM PRIVATE ${RCL_RCCL_INCLUDE} ${RCL_RCCL_INCLUDE}/rccl)
    endif()
  endif()
  message(STATUS "distributed: c10d NCCL process group found (${RCL_TORCH_BUILD} libtorch): GPU ranks use it")
else()
  message(STATUS "distributed: Gloo only (this ${RCL_TORCH_BUILD} libtorch has no c10d NCCL process group)")
endif()
