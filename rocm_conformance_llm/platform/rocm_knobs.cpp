#include "rocm_conformance_llm/platform/rocm_knobs.hpp"

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>

#include <fmt/format.h>

namespace rcl {
namespace {

using Value = std::optional<std::string>;

// Unset for `keep`, else "1" where the knob is `on_value` and "0" otherwise.
template <typename Knob>
Value on_off(Knob knob, Knob on_value) {
  if (knob == Knob::keep) return std::nullopt;
  return knob == on_value ? "1" : "0";
}

struct Knob {
  const char* variable;
  std::function<Value(const RocmConfig&, const std::string& output_dir)> value;
};

const std::vector<Knob>& knobs() {
  static const std::vector<Knob> table = {
      {"TORCH_BLAS_PREFER_HIPBLASLT",
       [](const RocmConfig& r, auto&) { return on_off(r.blas_backend, BlasBackend::hipblaslt); }},
      {"PYTORCH_TUNABLEOP_ENABLED", [](const RocmConfig& r, auto&) { return on_off(r.tunableop, KnobSwitch::on); }},
      {"PYTORCH_TUNABLEOP_FILENAME",
       [](const RocmConfig& r, auto&) {
         return r.tunableop_results_file.empty() ? Value() : r.tunableop_results_file;
       }},
      {"MIOPEN_FIND_MODE",
       [](const RocmConfig& r, auto&) {
         return r.miopen_find_mode == MiopenFindMode::keep ? Value() : Value(name_of(r.miopen_find_mode));
       }},
      // A user DB shared across jobs corrupts (MIOpen#1878, #2214): per-run gives each run its own.
      {"MIOPEN_USER_DB_PATH",
       [](const RocmConfig& r, const std::string& output_dir) -> Value {
         if (r.miopen_user_db.empty()) return std::nullopt;
         if (r.miopen_user_db != "per-run") return r.miopen_user_db;
         if (output_dir.empty()) return std::nullopt;
         return (std::filesystem::absolute(output_dir) / "miopen-user-db").string();
       }},
      // libtorch 2.x on ROCm reads PYTORCH_HIP_ALLOC_CONF first; 1.13 only the CUDA-named one.
      {"PYTORCH_HIP_ALLOC_CONF",
       [](const RocmConfig& r, auto&) { return allocator_conf(r).empty() ? Value() : allocator_conf(r); }},
      {"PYTORCH_CUDA_ALLOC_CONF",
       [](const RocmConfig& r, auto&) { return allocator_conf(r).empty() ? Value() : allocator_conf(r); }},
      // rocm-systems#7896: a lost SDMA completion hangs the host; off copies with blit kernels.
      {"HSA_ENABLE_SDMA", [](const RocmConfig& r, auto&) { return on_off(r.hsa_enable_sdma, KnobSwitch::on); }},
  };
  return table;
}

// Each knob variable's value as the process started (before any apply).
const std::map<std::string, std::string>& environment_at_start() {
  static const std::map<std::string, std::string> snapshot = [] {
    std::map<std::string, std::string> values;
    for (const auto& knob : knobs())
      if (const char* v = std::getenv(knob.variable)) values[knob.variable] = v;
    return values;
  }();
  return snapshot;
}

}  // namespace

std::string allocator_conf(const RocmConfig& r) {
  std::vector<std::string> parts;
  if (r.expandable_segments != KnobBool::keep)
    parts.push_back(std::string("expandable_segments:") + (r.expandable_segments == KnobBool::yes ? "True" : "False"));
  if (r.max_split_size_mb > 0) parts.push_back(fmt::format("max_split_size_mb:{}", r.max_split_size_mb));
  if (r.garbage_collection_threshold > 0)
    parts.push_back(fmt::format("garbage_collection_threshold:{}", r.garbage_collection_threshold));
  std::string text;
  for (const auto& p : parts) text += (text.empty() ? "" : ",") + p;
  return text;
}

nlohmann::json apply_rocm_knobs(const RocmConfig& rocm, const std::string& output_dir) {
  const auto& original = environment_at_start();
  nlohmann::json record = nlohmann::json::object();
  for (const auto& knob : knobs()) {
    const auto user = original.find(knob.variable);
    const Value value = knob.value(rocm, output_dir);
    if (!value) {
      if (user != original.end()) record[knob.variable] = {{"value", user->second}, {"source", "environment"}};
      continue;
    }
    record[knob.variable] = {{"value", *value}, {"source", "config"}};
    if (user != original.end() && user->second != *value) record[knob.variable]["replaced"] = user->second;
    ::setenv(knob.variable, value->c_str(), 1);
  }
  return record;
}

}  // namespace rcl
