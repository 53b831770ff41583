#include "rocm_conformance_llm/run/run_checkpoint.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/base/files.hpp"
#include "rocm_conformance_llm/base/sha256.hpp"
#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/checks/detectors/catalog.hpp"
#include "rocm_conformance_llm/loop/loop_access.hpp"
#include "rocm_conformance_llm/loop/training_state.hpp"

namespace rcl {
namespace fs = std::filesystem;

namespace {

constexpr const char* kManifest = "manifest.json";
std::string findings_file(int rank) { return fmt::format("findings-rank-{}.json", rank); }
std::string step_dir_name(int64_t step) { return fmt::format("step-{:08d}", step); }

// ---- reading ------------------------------------------------------------------------------
// A complete checkpoint: its manifest exists (written last, after every file it names).
bool is_complete(const fs::path& dir) { return fs::is_regular_file(dir / kManifest); }

std::optional<int64_t> step_of(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (!name.starts_with("step-")) return std::nullopt;
  return parse_number<int64_t>(std::string_view(name).substr(5));
}

// Complete checkpoints under `root`, oldest first.
std::vector<fs::path> checkpoints_in(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec))
    if (const auto step = step_of(entry.path()); step && entry.is_directory() && is_complete(entry.path()))
      found.emplace_back(*step, entry.path());
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

void verify_manifest(const fs::path& dir) {
  const auto manifest = read_checkpoint_json(dir / kManifest);
  if (manifest.value("format", "") != kCheckpointFormat || !manifest.contains("files") ||
      !manifest["files"].is_object())
    throw CheckpointError("checkpoint " + dir.string() + ": manifest.json is not a " + kCheckpointFormat + " manifest");
  std::vector<std::string> required{kStateFile};
  const auto files = weight_and_optimizer_files(
      manifest["files"].contains(kStateFile) ? read_checkpoint_json(dir / kStateFile) : nlohmann::json());
  required.insert(required.end(), files.begin(), files.end());
  for (const auto& name : required)
    if (!manifest["files"].contains(name))
      throw CheckpointError("checkpoint " + dir.string() + ": manifest.json does not list " + name);
  for (const auto& [name, digest] : manifest["files"].items()) {
    if (name.find('/') != std::string::npos || !digest.is_string())
      throw CheckpointError("checkpoint " + dir.string() + ": manifest.json entry '" + name + "' is malformed");
    const fs::path file = dir / name;
    if (!fs::is_regular_file(file)) throw CheckpointError("checkpoint " + dir.string() + ": missing " + name);
    if (sha256_of_file(file.string()) != digest.get<std::string>())
      throw CheckpointError("checkpoint " + dir.string() + ": " + name +
                            " does not match its SHA-256 in manifest.json (truncated, corrupted or edited)");
  }
}

// The first difference between what the checkpoint was and what this run is, if any.
std::optional<std::string> identity_difference(const nlohmann::json& state, const RunIdentity& now) {
  const int then_world = state.value("world_size", -1);
  if (then_world != now.world_size) return fmt::format("world size {} (this run: {})", then_world, now.world_size);
  const auto then_modes = state.value("stress_modes", std::vector<std::string>{});
  if (then_modes != now.stress_modes)
    return fmt::format("stress modes [{}] (this run: [{}])", join(then_modes, ","), join(now.stress_modes, ","));
  const auto& then = state.at("training");
  for (const auto& [key, value] : now.training.items()) {
    if (std::ranges::find(kResumeMayDiffer, key) != std::end(kResumeMayDiffer)) continue;
    if (!then.contains(key)) {
      // A field added after the checkpoint was written, at its default, changes nothing.
      const auto& fields = training_fields();
      const auto field = std::ranges::find(fields, key, &ConfigField::name);
      if (field != fields.end() && field->default_value == value) continue;
      return fmt::format("no training.{} (this run: {})", key, value.dump());
    }
    if (then[key] != value) return fmt::format("training.{}={} (this run: {})", key, then[key].dump(), value.dump());
  }
  return std::nullopt;
}

// ---- writing ------------------------------------------------------------------------------
// `rank`'s findings so far, beside its training state.
void write_findings(const fs::path& dir, int rank, const std::vector<Finding>& findings_so_far) {
  nlohmann::json findings = nlohmann::json::array();
  for (const auto& f : findings_so_far) findings.push_back(to_json(f));
  write_file_synced(dir / findings_file(rank), {nlohmann::json{{"findings", findings}}.dump(2) + "\n"});
}

// Rename `from` onto `to` (a directory): an existing `to` (the same step written again after a
// resume) is moved aside first and removed once the new one is in place.
void replace_directory(const fs::path& from, const fs::path& to) {
  if (fs::exists(to)) {
    const fs::path aside = to.parent_path() / (".old-" + to.filename().string());
    fs::remove_all(aside);
    fs::rename(to, aside);
    fs::rename(from, to);
    fs::remove_all(aside);
  } else {
    fs::rename(from, to);
  }
}

}  // namespace

ResumePoint resolve_resume(const std::string& spec, const fs::path& output_dir, const RunIdentity& now) {
  fs::path dir;
  if (spec == "latest") {
    const auto found = checkpoints_in(output_dir / "checkpoints");
    if (found.empty())
      throw CheckpointError("--resume latest: no complete checkpoint under " + (output_dir / "checkpoints").string());
    dir = found.back();
  } else if (fs::is_regular_file(fs::path(spec) / kStateFile) || fs::is_regular_file(fs::path(spec) / kManifest)) {
    dir = spec;
  } else if (fs::is_directory(fs::path(spec) / "checkpoints")) {
    const auto found = checkpoints_in(fs::path(spec) / "checkpoints");
    if (found.empty()) throw CheckpointError("--resume '" + spec + "': no complete checkpoint under its checkpoints/");
    dir = found.back();
  } else {
    throw CheckpointError("--resume '" + spec + "': not a checkpoint, a run directory with checkpoints/, or 'latest'");
  }
  dir = fs::weakly_canonical(dir);
  verify_manifest(dir);
  const auto state = read_checkpoint_json(dir / kStateFile);
  if (state.value("format", "") != kCheckpointFormat || state.value("version", 0) != kCheckpointVersion ||
      !state.contains("training") || !state["training"].is_object())
    throw CheckpointError(fmt::format("checkpoint {}: state.json is not a version {} {}", dir.string(),
                                      kCheckpointVersion, kCheckpointFormat));
  if (const auto diff = identity_difference(state, now))
    throw CheckpointError(
        fmt::format("--resume: checkpoint {} was written with {}; resume with the same "
                    "configuration",
                    dir.string(), *diff));
  try {
    return {dir, state.at("step").get<int64_t>()};
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError("checkpoint " + dir.string() + ": state.json: " + e.what());
  }
}

std::optional<ResumePoint> resolve_resume_auto(const fs::path& output_dir, const RunIdentity& now) {
  if (!checkpoints_in(output_dir / "checkpoints").empty()) return resolve_resume("latest", output_dir, now);
  const fs::path config = output_dir / "config.json";
  if (!fs::exists(config)) return std::nullopt;
  const auto earlier = read_checkpoint_json(config);
  if (!earlier.contains("training") || !earlier["training"].is_object())
    throw CheckpointError("--resume auto: " + config.string() + " is not a run's config.json");
  if (const auto diff = identity_difference(earlier, now))
    throw CheckpointError(
        fmt::format("--resume auto: --output-dir {} holds another run (config.json: {}) and no "
                    "checkpoint; choose a new directory",
                    output_dir.string(), *diff));
  return std::nullopt;
}

nlohmann::json record_attempt(const fs::path& output_dir, int rank, const std::optional<ResumePoint>& from) {
  const fs::path path =
      output_dir / (rank == 0 ? std::string("attempts.jsonl") : fmt::format("attempts.rank{}.jsonl", rank));
  nlohmann::json attempts = nlohmann::json::array();
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto entry = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (entry.is_object()) attempts.push_back(entry);
  }
  in.close();
  const nlohmann::json now = {
      {"attempt", attempts.size() + 1},
      {"from_step", from ? from->step : 0},
      {"checkpoint", from ? from->dir.string() : ""},
      {"unix_time", std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()}};
  attempts.push_back(now);
  std::string lines;  // rewritten whole (temp file, fsync, rename): a kill leaves the old one or the new
  for (const auto& a : attempts) lines += a.dump() + "\n";
  write_file_atomically(path, lines);
  return {{"count", attempts.size() - 1}, {"attempts", attempts}};
}

std::vector<Finding> checkpoint_findings(const fs::path& dir, int rank) {
  const fs::path path = dir / findings_file(rank);
  if (!fs::exists(path)) return {};
  const nlohmann::json doc = read_checkpoint_json(path);  // alive through the loop (not a range-for temporary)
  std::vector<Finding> out;
  try {
    for (const auto& item : doc.at("findings")) {
      Finding f = finding_from_json(item);
      if (f.step >= 1) out.push_back(std::move(f));
    }
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {  // JSON of another shape, a malformed finding
    throw CheckpointError("checkpoint " + dir.string() + ": " + path.filename().string() + ": " + e.what());
  }
  return out;
}

Checkpointer::Checkpointer(LoopAccess& loop, const FindingLog& findings, CheckpointPolicy policy, fs::path output_dir,
                           RunIdentity identity)
    : loop_(loop),
      findings_(findings),
      policy_(policy),
      root_(std::move(output_dir) / "checkpoints"),
      identity_(std::move(identity)),
      started_(SteadyClock::now()) {}

void Checkpointer::between_steps(int64_t step) {
  bool due = policy_.every_steps > 0 && step % policy_.every_steps == 0;
  // Ranks' clocks differ: a time-based checkpoint is due when it is on any rank.
  if (policy_.every_s > 0)
    due = loop_.mean_across_ranks(seconds_since(started_) >= policy_.every_s ? 1.0 : 0.0) > 0 || due;
  if (due) save("interval");
}

fs::path Checkpointer::save(const std::string& reason) {
  const auto snap = loop_.snapshot();
  const fs::path final_dir = root_ / step_dir_name(snap.step);
  if (snap.step == last_saved_step_) return final_dir;
  loop_.enter_phase(phase::checkpoint, snap.step);  // the watchdog and heartbeat.json name it
  const auto start = SteadyClock::now();
  const int rank = loop_.rank();
  const fs::path tmp = root_ / (".tmp-" + step_dir_name(snap.step));
  if (rank == 0 && fs::exists(root_)) {
    // Left by a write that was killed (a signal's grace ran out, SIGKILL, a full disk).
    for (const auto& entry : fs::directory_iterator(root_)) {
      const auto name = entry.path().filename().string();
      if (name.starts_with(".tmp-")) fs::remove_all(entry.path());
    }
  }
  loop_.mean_across_ranks(0);  // no rank writes into a directory rank 0 is removing
  fs::create_directories(tmp);

  write_findings(tmp, rank, findings_.snapshot());
  write_training_state(loop_, snap, tmp, /*shared=*/rank == 0,
                       {{"reason", reason},
                        {"world_size", identity_.world_size},
                        {"stress_modes", identity_.stress_modes},
                        {"training", identity_.training}});
  loop_.mean_across_ranks(0);  // every rank's file is on disk
  if (rank == 0) {
    nlohmann::json files = nlohmann::json::object();
    for (const auto& entry : fs::directory_iterator(tmp))
      files[entry.path().filename().string()] = sha256_of_file(entry.path().string());
    write_file_synced(tmp / kManifest,
                      {nlohmann::json{{"format", kCheckpointFormat}, {"files", files}}.dump(2) + "\n"});
    sync_directory(tmp);
    replace_directory(tmp, final_dir);
    sync_directory(root_);
    const auto kept = checkpoints_in(root_);
    for (size_t i = 0; i + policy_.keep < kept.size(); ++i) fs::remove_all(kept[i]);
    spdlog::info("checkpoint ({}) at step {}: {} ({:.2f} s)", reason, snap.step, final_dir.string(),
                 seconds_since(start));
  }
  last_saved_step_ = snap.step;
  started_ = SteadyClock::now();
  return final_dir;
}

}  // namespace rcl
