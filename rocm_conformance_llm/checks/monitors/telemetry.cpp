#include "rocm_conformance_llm/checks/monitors/telemetry.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/checks/detectors/catalog.hpp"
#include "rocm_conformance_llm/platform/rocm_dlopen.hpp"

namespace rcl {

nlohmann::json to_json(const TelemetrySample& s) {
  return {{"t_s", s.t_s},
          {"step", s.step},
          {"device_count", s.device_count ? nlohmann::json(*s.device_count) : nlohmann::json(nullptr)},
          {"gpus", s.gpus}};
}

namespace {

// The keys of a sample that explain a slow or failed step; the counters stay in telemetry.jsonl.
constexpr const char* kBriefKeys[] = {"index",   "temperature_edge_c", "temperature_junction_c", "temperature_memory_c",
                                      "power_w", "gfx_clock_mhz",      "mem_clock_mhz",          "throttle_status"};

nlohmann::json brief(const TelemetrySample& s) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& gpu : s.gpus) {
    nlohmann::json g = nlohmann::json::object();
    for (const char* key : kBriefKeys)
      if (gpu.contains(key)) g[key] = gpu.at(key);
    gpus.push_back(std::move(g));
  }
  return {{"t_s", s.t_s}, {"step", s.step}, {"gpus", std::move(gpus)}};
}

}  // namespace

void TelemetryTracker::check_counter(const nlohmann::json& gpu, GpuState& state, const TelemetrySample& s,
                                     const char* key, const char* signature, Severity severity) {
  if (!gpu.contains(key) || !state.last.contains(key)) return;
  const auto before = state.last.at(key).get<uint64_t>(), now = gpu.at(key).get<uint64_t>();
  if (now <= before) return;
  const auto index = gpu.at("index").get<uint32_t>();
  log_.add(Finding{
      .component = component::hip_runtime,
      .signature = signature,
      .severity = severity,
      .step = s.step,
      .rank = rank_,
      .message = fmt::format("GPU {}: {} went from {} to {} (seen after step {})", index, key, before, now, s.step),
      .evidence = {{"gpu", index},
                   {"counter", key},
                   {"previous", before},
                   {"now", now},
                   {"at_start", state.first.value(key, nlohmann::json(nullptr))},
                   {"t_s", s.t_s}}});
}

void TelemetryTracker::gone(uint32_t index, GpuState& state, const TelemetrySample& s, const std::string& why) {
  if (state.reported_gone) return;
  state.reported_gone = true;
  log_.add(Finding{.component = component::hip_runtime,
                   .signature = "gpu_disappeared",
                   .severity = Severity::fail,
                   .step = s.step,
                   .rank = rank_,
                   .message = fmt::format("GPU {} {} (seen after step {})", index, why, s.step),
                   .evidence = {{"gpu", index},
                                {"device_count_before", count_before_.value_or(0)},
                                {"device_count_now",
                                 s.device_count ? nlohmann::json(*s.device_count) : nlohmann::json("query failed")},
                                {"last_answer", state.last},
                                {"t_s", s.t_s}}});
}

void TelemetryTracker::add(const TelemetrySample& s) {
  ++samples_;
  if (!count_before_) count_before_ = s.device_count;
  count_after_ = s.device_count;
  // GPUs SMI no longer lists (the count dropped, or the query itself failed).
  const uint32_t listed = s.device_count.value_or(0);
  for (auto& [index, state] : gpus_)
    if (index >= listed)
      gone(
          index, state, s,
          s.device_count ? "is no longer listed by the SMI library" : "vanished: the SMI library cannot count devices");

  for (const auto& gpu : s.gpus) {
    const auto index = gpu.at("index").get<uint32_t>();
    auto& state = gpus_[index];
    const bool responding = gpu.value("responding", false);
    if (state.first.is_null()) state.first = gpu;
    if (!responding) {
      if (state.responded) gone(index, state, s, "stopped answering SMI queries");
      continue;
    }
    state.responded = true;
    check_counter(gpu, state, s, "ecc_uncorrectable", "ecc_uncorrectable_increase", Severity::fail);
    check_counter(gpu, state, s, "ecc_correctable", "ecc_correctable_increase", Severity::warn);

    // A throttled sample overlaps the step in progress (s.step + 1); the episode lasts until a
    // sample shows it lifted.
    const uint64_t throttle = gpu.value("throttle_status", uint64_t{0});
    Episode* open = !state.episodes.empty() && state.episodes.back().open ? &state.episodes.back() : nullptr;
    if (throttle != 0) {
      if (!open) {
        state.episodes.push_back({.first_step = s.step + 1, .last_step = s.step + 1, .first_t_s = s.t_s});
        open = &state.episodes.back();
      }
      open->status_bits |= throttle;
      open->last_step = s.step + 1;
      open->last_t_s = s.t_s;
    } else if (open) {
      open->last_step = s.step + 1;
      open->open = false;
    }

    auto& extremes = extremes_[index];
    for (const auto& [key, value] : gpu.items()) {
      if (!value.is_number() || key == "index") continue;
      const double v = value.get<double>();
      auto [it, fresh] = extremes.try_emplace(key, v, v);
      it->second = {std::min(it->second.first, v), std::max(it->second.second, v)};
    }
    state.last = gpu;
  }
}

void TelemetryTracker::finish(int64_t last_step) {
  for (auto& [index, state] : gpus_) {
    if (state.episodes.empty()) continue;
    nlohmann::json episodes = nlohmann::json::array();
    std::string ranges;
    uint64_t bits = 0;
    for (auto& e : state.episodes) {
      e.open = false;
      e.first_step = std::clamp<int64_t>(e.first_step, 1, std::max<int64_t>(1, last_step));
      e.last_step = std::clamp<int64_t>(e.last_step, e.first_step, std::max(e.first_step, last_step));
      bits |= e.status_bits;
      episodes.push_back({{"first_step", e.first_step},
                          {"last_step", e.last_step},
                          {"first_t_s", e.first_t_s},
                          {"last_t_s", e.last_t_s},
                          {"throttle_status", e.status_bits}});
      ranges += fmt::format("{}{}..{}", ranges.empty() ? "" : ", ", e.first_step, e.last_step);
    }
    log_.add(Finding{
        .component = component::hip_runtime,
        .signature = "gpu_throttled",
        .severity = Severity::warn,
        .step = state.episodes.front().first_step,
        .rank = rank_,
        .message = fmt::format("GPU {} was throttled (thermal or power; throttle_status 0x{:x}) during steps {}: step "
                               "times there are not the device's",
                               index, bits, ranges),
        .evidence = {{"gpu", index}, {"episodes", episodes}}});
  }
}

nlohmann::json TelemetryTracker::report() const {
  nlohmann::json before = nlohmann::json::array(), after = nlohmann::json::array(), extremes = nlohmann::json::object();
  nlohmann::json episodes = nlohmann::json::object();
  for (const auto& [index, state] : gpus_) {
    before.push_back(state.first);
    after.push_back(state.last.is_null() ? state.first : state.last);
    nlohmann::json list = nlohmann::json::array();
    for (const auto& e : state.episodes)
      list.push_back({{"first_step", e.first_step}, {"last_step", e.last_step}, {"throttle_status", e.status_bits}});
    if (!list.empty()) episodes[std::to_string(index)] = list;
  }
  for (const auto& [index, keys] : extremes_)
    for (const auto& [key, range] : keys)
      extremes[std::to_string(index)][key] = {{"min", range.first}, {"max", range.second}};
  const auto count = [](const std::optional<uint32_t>& c) { return c ? nlohmann::json(*c) : nlohmann::json(nullptr); };
  return {{"samples", samples_},
          {"device_count_before", count(count_before_)},
          {"device_count_after", count(count_after_)},
          {"before", before},
          {"after", after},
          {"extremes", extremes},
          {"throttle_episodes", episodes}};
}

NodeMonitor::NodeMonitor(const DiagnosticsConfig& diag, FindingLog& log, std::filesystem::path output_dir, int rank)
    : interval_s_(diag.telemetry_interval_s),
      log_(log),
      rank_(rank),
      jsonl_path_(output_dir / (rank == 0 ? "telemetry.jsonl" : fmt::format("telemetry.rank{}.jsonl", rank))),
      smi_(telemetry_smi()),
      tracker_(log, rank),
      kernel_log_(open_kernel_log(diag.kernel_log_source)) {
  nlohmann::json telemetry = {{"interval_s", interval_s_}};
  if (interval_s_ <= 0) {
    telemetry["available"] = false;
    telemetry["reason"] = "off (diagnostics.telemetry_interval_s=0)";
  } else {
    const SmiStatus& smi = smi_.status();
    telemetry_on_ = smi.available;
    telemetry["available"] = smi.available;
    telemetry["library"] = smi.library;
    telemetry["interface"] = smi_.interface;
    if (!smi.available) telemetry["reason"] = fmt::format("{}; {}", kAmdSmi.status().reason, smi.reason);
  }
  if (!telemetry_on_) spdlog::info("GPU telemetry skipped: {}", telemetry.at("reason").get<std::string>());
  if (!kernel_log_.source) spdlog::info("kernel log {}", kernel_log_.description);
  report_ = {{"telemetry", telemetry}, {"kernel_log", {{"source", kernel_log_.description}, {"matches", 0}}}};
}

NodeMonitor::~NodeMonitor() { stop(); }

void NodeMonitor::start() {
  started_ = std::chrono::steady_clock::now();
  if (telemetry_on_) {
    jsonl_.open(jsonl_path_, std::ios::out | std::ios::trunc);
    sample_round();
  }
  if (interval_s_ > 0 && (telemetry_on_ || kernel_log_.source)) thread_ = std::thread([this] { loop(); });
}

void NodeMonitor::loop() {
  const auto interval = std::chrono::duration<double>(interval_s_);
  std::unique_lock<std::mutex> lock(wake_mutex_);
  while (!wake_.wait_for(lock, interval, [this] { return stopping_; })) {
    lock.unlock();
    if (telemetry_on_) sample_round();
    read_kernel_log();
    lock.lock();
  }
}

void NodeMonitor::stop() {
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    if (stopped_) return;
    stopped_ = stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (telemetry_on_) {
    sample_round();
    std::lock_guard<std::mutex> lock(smi_mutex_);
    tracker_.finish(step_.load());
    std::lock_guard<std::mutex> report_lock(report_mutex_);
    report_["telemetry"].update(tracker_.report());
  }
  read_kernel_log();
}

void NodeMonitor::drain_kernel_log() { read_kernel_log(); }

void NodeMonitor::sample_round() {
  TelemetrySample s;
  s.t_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  s.step = step_.load();
  s.device_count = smi_.device_count();
  for (uint32_t i = 0; i < s.device_count.value_or(0); ++i) s.gpus.push_back(smi_.sample(i));
  std::lock_guard<std::mutex> lock(smi_mutex_);
  jsonl_ << to_json(s).dump() << "\n" << std::flush;
  tracker_.add(s);
  std::lock_guard<std::mutex> report_lock(report_mutex_);
  report_["telemetry"].update(tracker_.report());
  latest_ = brief(s);
}

nlohmann::json NodeMonitor::latest_sample() const {
  std::lock_guard<std::mutex> lock(report_mutex_);
  return latest_;
}

void NodeMonitor::read_kernel_log() {
  std::lock_guard<std::mutex> lock(kernel_mutex_);
  if (!kernel_log_.source) return;
  for (const auto& line : kernel_log_.source->read_new_lines())
    if (const auto match = classify_kernel_line(line)) {
      ++kernel_matches_;
      log_.add(kernel_log_finding(*match, kernel_log_.description, step_.load(), rank_));
    }
  std::lock_guard<std::mutex> report_lock(report_mutex_);
  report_["kernel_log"]["matches"] = kernel_matches_;
}

void NodeMonitor::record_coverage(RunCoverage& coverage) const {
  std::lock_guard<std::mutex> lock(report_mutex_);
  coverage.record(registered_detector("telemetry"), telemetry_on_,
                  report_.at("telemetry").value("reason", std::string("off")));
  coverage.record(registered_detector("kernel_log"), kernel_log_.source != nullptr, kernel_log_.description);
}

nlohmann::json NodeMonitor::report_sections() const {
  std::lock_guard<std::mutex> lock(report_mutex_);
  return report_;
}

}  // namespace rcl
