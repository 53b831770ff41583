// Console logging (spdlog, rank-tagged) and the soak summary line; the per-step metrics file is
// reports/metrics_writer.hpp.
#pragma once

#include <cstdint>
#include <string>

#include <spdlog/spdlog.h>

namespace rcl {

// Console logger named "rcl"; non-zero ranks log only warnings unless `all_ranks_verbose`. With
// several ranks each line starts "[rank R/W HOST]".
void init_logging(int rank, int world_size, bool all_ranks_verbose);

// A line every rank prints whatever its level (the job's outcome, which each node's console ends
// with), in the logger's format.
void log_unfiltered(spdlog::level::level_enum level, const std::string& text);

// Bytes as MiB with one decimal ("n/a" for a negative count: not available).
std::string human_bytes(int64_t bytes);
// The soak summary line (every diagnostics.summary_interval_s): `progress` (format_progress,
// with the throughput over the interval), then the memory now and its change over the interval
// and since the first step, so a slow leak shows in a long log without reading every line.
std::string format_soak_summary(const std::string& progress, int64_t memory_now, int64_t memory_at_last_summary,
                                int64_t memory_at_first_step, double interval_s);

}  // namespace rcl
