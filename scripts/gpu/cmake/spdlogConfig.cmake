# spdlog and fmt header-only from the carried folder (scripts/gpu/make_deps.sh): the GPU machine
# has neither, and header-only use needs no shared library built for another system.
# RCL_GPUDEPS is the carried folder (set by scripts/gpu/run.sh).
if(NOT TARGET spdlog::spdlog)
  add_library(spdlog::spdlog INTERFACE IMPORTED)
  set_target_properties(spdlog::spdlog PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${RCL_GPUDEPS}/usr/include"
    INTERFACE_COMPILE_DEFINITIONS "SPDLOG_HEADER_ONLY;SPDLOG_FMT_EXTERNAL;FMT_HEADER_ONLY")
endif()
set(spdlog_FOUND TRUE)
