#include "rocm_conformance_llm/utils/logging.hpp"

#include <cstdio>
#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "rocm_conformance_llm/base/strings.hpp"

namespace rcl {

void init_logging(int rank, int world_size, bool all_ranks_verbose) {
  auto logger = spdlog::get("rcl");
  if (!logger) {
    logger = spdlog::stderr_color_mt("rcl");
    spdlog::set_default_logger(logger);
  }
  // The host too: the lines of a multi-node job's ranks meet in one log (torchrun, srun).
  const std::string tag = world_size > 1 ? fmt::format("[rank {}/{} {}] ", rank, world_size, host_name()) : "";
  logger->set_pattern("%H:%M:%S.%e %^%l%$ " + tag + "%v");
  logger->set_level(rank == 0 || all_ranks_verbose ? spdlog::level::info : spdlog::level::warn);
  logger->flush_on(spdlog::level::info);
}

void log_unfiltered(spdlog::level::level_enum level, const std::string& text) {
  const auto logger = spdlog::default_logger();
  const spdlog::details::log_msg msg(logger->name(), level, text);
  for (const auto& sink : logger->sinks()) sink->log(msg);
  logger->flush();
}

std::string human_bytes(int64_t bytes) {
  if (bytes < 0) return "n/a";
  return fmt::format("{:.1f}MiB", static_cast<double>(bytes) / (1 << 20));
}

std::string format_soak_summary(const std::string& progress, int64_t memory_now, int64_t memory_at_last_summary,
                                int64_t memory_at_first_step, double interval_s) {
  const auto mib = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
  return fmt::format("summary: {} | mem {} ({:+.1f}MiB over the last {:.1f} min, {:+.1f}MiB since step 1)", progress,
                     human_bytes(memory_now), mib(memory_now - memory_at_last_summary), interval_s / 60.0,
                     mib(memory_now - memory_at_first_step));
}

}  // namespace rcl
