# RCCL backend: ProcessGroupNCCL of a ROCm libtorch (RCCL under the NCCL name). Included after
# rcl_core is defined. Its header is hipified, so that one file builds with the HIP host flags;
# on CPU or CUDA libtorch builds nothing is added and a GPU run with several ranks is refused.
if(RCL_TORCH_BUILD STREQUAL "rocm")
  find_package(hip CONFIG REQUIRED PATHS $ENV{ROCM_PATH} /opt/rocm)
  find_path(RCL_RCCL_INCLUDE rccl/rccl.h PATHS $ENV{ROCM_PATH}/include /opt/rocm/include)
  set(_rcl_rccl_source ${CMAKE_CURRENT_SOURCE_DIR}/rocm_conformance_llm/transport/process_group_rccl_rocm.cpp)
  target_sources(rcl_core PRIVATE ${_rcl_rccl_source})
  # Only the RCCL file takes the HIP flags; the rest stays device-agnostic libtorch.
  set_source_files_properties(${_rcl_rccl_source} PROPERTIES
    COMPILE_DEFINITIONS "__HIP_PLATFORM_AMD__=1"
    SKIP_PRECOMPILE_HEADERS ON)
  target_link_libraries(rcl_core PRIVATE hip::host)
  if(RCL_RCCL_INCLUDE)
    target_include_directories(rcl_core SYSTEM PRIVATE ${RCL_RCCL_INCLUDE} ${RCL_RCCL_INCLUDE}/rccl)
  endif()
  target_compile_definitions(rcl_core PRIVATE RCL_HAVE_RCCL=1)
  message(STATUS "distributed: RCCL backend (ProcessGroupNCCL of the ROCm libtorch) enabled")
else()
  message(STATUS "distributed: Gloo only (libtorch build kind '${RCL_TORCH_BUILD}' has no RCCL)")
endif()
