// What the node tests share: scratch directories, the recorded amdgpu kernel log, the fake SMI
// libraries' environment (tests/fakes/), and a crafted KFD topology for `doctor`.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "support/cli_runner.hpp"

namespace rcl::testing {

inline const std::filesystem::path kRecordedLog =
    std::filesystem::path(RCL_SOURCE_DIR) / "tests/data/amdgpu-kernel.log";

// An empty scratch directory for one node test.
inline std::filesystem::path node_dir(const std::string& name) {
  const auto dir = fresh_dir("node", name);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::filesystem::path write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

inline const std::string kNoAmdSmi = "RCL_AMD_SMI_LIBRARY=/nonexistent/libamd_smi.so";

// The fake ROCm SMI, with amd-smi kept out (it is preferred where it loads).
inline std::string fake_smi_env(const std::filesystem::path& script) {
#ifdef RCL_FAKE_SMI
  return std::string("RCL_ROCM_SMI_LIBRARY=") + RCL_FAKE_SMI + " FAKE_RSMI_SCRIPT=" + script.string() + " " + kNoAmdSmi;
#else
  (void)script;
  return kNoAmdSmi;
#endif
}
inline std::string fake_amd_smi_env(const std::filesystem::path& script) {
  return std::string("RCL_AMD_SMI_LIBRARY=") + RCL_FAKE_AMD_SMI + " FAKE_AMDSMI_SCRIPT=" + script.string();
}

#ifndef RCL_FAKE_SMI
#define RCL_REQUIRE_FAKE_SMI() GTEST_SKIP() << "built without the ROCm SMI header: no fake library"
#else
#define RCL_REQUIRE_FAKE_SMI() (void)0
#endif

// A KFD topology with one CPU node and `gpus` MI300-class GPU nodes.
inline std::filesystem::path fake_topology(const std::filesystem::path& dir, int gpus) {
  std::filesystem::create_directories(dir / "0");
  write_file(dir / "0/properties", "cpu_cores_count 64\ngfx_target_version 0\n");
  for (int i = 1; i <= gpus; ++i) {
    std::filesystem::create_directories(dir / std::to_string(i));
    write_file(dir / std::to_string(i) / "properties", "simd_count 304\ngfx_target_version 90402\n");
  }
  return dir;
}

}  // namespace rcl::testing
