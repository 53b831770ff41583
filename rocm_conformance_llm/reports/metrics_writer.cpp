#include "rocm_conformance_llm/reports/metrics_writer.hpp"

#include <stdexcept>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/files.hpp"
#include "rocm_conformance_llm/utils/logging.hpp"

namespace rcl {

nlohmann::json to_json(const StepRecord& r) {
  nlohmann::json j = {
      {"step", r.step},
      {"rank", r.rank},
      {"world_size", r.world_size},
      {"loss", r.loss},
      {"lr", r.lr},
      {"grad_norm", r.grad_norm},
      {"loss_scale", r.loss_scale},
      {"skipped", r.skipped},
      {"tokens", r.tokens},
      {"step_time_s", r.step_time_s},
      {"step_time_clock", r.step_time_clock},
      {"tokens_per_s", r.tokens_per_s},
      {"memory",
       {{"allocated_bytes", r.memory.allocated_bytes},
        {"reserved_bytes", r.memory.reserved_bytes},
        {"peak_allocated_bytes", r.memory.peak_allocated_bytes},
        {"rss_bytes", r.memory.rss_bytes},
        {"source", r.memory.source}}},
      {"host", {{"others_cpu_share", r.host.others_cpu_share}, {"run_queue_wait_s", r.host.run_queue_wait_s}}},
  };
  if (!r.phase_s.empty()) j["phase_s"] = r.phase_s;
  if (r.host_reads) j["host_reads"] = *r.host_reads;
  if (!r.collectives.empty()) {
    auto& list = j["collectives"] = nlohmann::json::array();
    for (const auto& c : r.collectives)
      list.push_back({{"op", c.op},
                      {"bytes", c.bytes},
                      {"seconds", c.seconds},
                      {"bus_bandwidth_gbps", c.bus_bandwidth_gbps},
                      {"sequence", c.sequence},
                      {"kind", c.kind},
                      {"reduce_op", c.reduce_op},
                      {"dtype", c.dtype},
                      {"group", c.group}});
  }
  if (r.val_loss) j["val_loss"] = *r.val_loss;
  if (!r.op_counts.empty()) j["op_counts"] = r.op_counts;
  return j;
}

std::string format_step_line(const StepRecord& r, const std::vector<std::string>& stress_modes) {
  std::string modes;
  for (const auto& m : stress_modes) modes += (modes.empty() ? "" : ",") + m;
  const int64_t mem = r.memory.allocated_bytes >= 0 ? r.memory.allocated_bytes : r.memory.rss_bytes;
  std::string line = fmt::format(
      "step {:>5} | loss {:.4f} | lr {:.2e} | gnorm {:.3f} | {:.1f} ms | {:.0f} tok/s | mem {} ({})", r.step, r.loss,
      r.lr, r.grad_norm, r.step_time_s * 1e3, r.tokens_per_s, human_bytes(mem), r.memory.source);
  if (r.loss_scale != 1.0) line += fmt::format(" | scale {:g}", r.loss_scale);
  if (r.skipped) line += " | SKIPPED (non-finite grads)";
  if (r.val_loss) line += fmt::format(" | val {:.4f}", *r.val_loss);
  line += " | stress " + (modes.empty() ? std::string("none") : modes);
  return line;
}

MetricsWriter::MetricsWriter(const std::filesystem::path& output_dir, int rank, std::vector<std::string> stress_modes,
                             std::optional<int64_t> keep_through_step)
    : path_(output_dir / (rank == 0 ? "metrics.jsonl" : fmt::format("metrics.rank{}.jsonl", rank))),
      stress_modes_(std::move(stress_modes)) {
  std::filesystem::create_directories(output_dir);
  if (keep_through_step) {
    // The steps after the checkpoint are run again: their old lines go (temp + rename).
    std::ifstream in(path_);
    std::string kept, line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.value("step", int64_t{0}) <= *keep_through_step) kept += line + '\n';
    }
    write_file_atomically(path_, kept);
  }
  out_.open(path_, std::ios::out | (keep_through_step ? std::ios::app : std::ios::trunc));
  if (!out_) throw std::runtime_error("cannot write " + path_.string());
}

void MetricsWriter::set_identity(int world_rank, int local_rank, const std::string& host) {
  identity_ = {{"world_rank", world_rank}, {"local_rank", local_rank}, {"hostname", host}};
}

void MetricsWriter::write(const StepRecord& r, const nlohmann::json& telemetry) {
  auto j = to_json(r);
  j.update(identity_);
  j["stress_modes"] = stress_modes_;
  if (!telemetry.is_null()) j["telemetry"] = telemetry;
  out_ << j.dump() << '\n';
  out_.flush();
}

}  // namespace rcl
