// A finding: one failure signature seen, attributed to a ROCm component.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rcl {

enum class Severity { info, warn, fail };

// Component names are stable: they are JUnit test-case names and report.json values.
namespace component {
inline constexpr const char* rocblas = "rocBLAS/hipBLASLt";
inline constexpr const char* rocrand = "rocRAND";
inline constexpr const char* rccl = "RCCL";
inline constexpr const char* allocator = "ROCr allocator";
inline constexpr const char* miopen = "MIOpen";
inline constexpr const char* hip_runtime = "HIP runtime";
// The fused SDPA kernels (AOTriton flash / memory-efficient, CK flash on ROCm).
inline constexpr const char* attention = "AOTriton/CK attention";
inline constexpr const char* all[] = {rocblas, rocrand, rccl, allocator, miopen, hip_runtime, attention};
}  // namespace component

struct Finding {
  std::string component;   // one of component::all
  std::string signature;   // short stable id, e.g. "nonfinite_loss", "memory_leak"
  Severity severity = Severity::warn;
  int64_t step = 0;
  int rank = 0;
  std::string message;     // one human-readable line
  nlohmann::json evidence = nlohmann::json::object();
};

std::string to_string(Severity s);
Severity severity_from_string(const std::string& s);  // ConfigError on unknown
nlohmann::json to_json(const Finding& f);
// A double for evidence: JSON has no NaN/Inf, so those become the strings "nan", "inf", "-inf".
nlohmann::json json_number(double v);

// Reads what to_json wrote (a previous run's report.json); ConfigError on a malformed entry.
Finding finding_from_json(const nlohmann::json& j);

// Thread-safe collection of findings (the watchdog thread reports too). The one rate limit:
// each signature is kept at most as often as its registry entry says (diagnostics/registry.cpp;
// once for a signature no detector declares); later ones are counted, not stored.
class FindingLog {
 public:
  // Returns whether `f` was kept.
  bool add(Finding f);
  std::vector<Finding> snapshot() const;
  size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::vector<Finding> findings_;
  std::map<std::string, int> seen_;  // per signature, kept or not
};

}  // namespace rcl
