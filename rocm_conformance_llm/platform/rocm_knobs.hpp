// The rocm.* config keys (config/fields.hpp's RCL_ROCM_FIELDS) as the environment variables libtorch
// and the ROCm libraries read when they initialise: HSA_ENABLE_SDMA when HIP starts (ROCr),
// the allocator settings at the first device allocation, TORCH_BLAS_PREFER_HIPBLASLT and
// TunableOp's at the first GEMM, MIOpen's at its first handle.
//
// The rule: a knob left at its default ("default", "" or 0) leaves its variable as the
// environment has it; a knob the config sets wins over the environment (the replaced value is
// recorded, and the runner logs it). The environment is judged as the process started, so applying twice
// (main before the first HIP call, then the runner once the output directory is known) gives
// the same result.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/config.hpp"

namespace rcl {

// Sets the variables; returns {VAR: {"value", "source": "config"|"environment", "replaced"?}} for
// every knob variable that is set, for config.json. `output_dir` empty: rocm.miopen_user_db=per-run
// waits for the next call.
nlohmann::json apply_rocm_knobs(const RocmConfig& rocm, const std::string& output_dir);

// The allocator settings as PYTORCH_HIP_ALLOC_CONF text ("" when none is set).
std::string allocator_conf(const RocmConfig& rocm);

}  // namespace rcl
