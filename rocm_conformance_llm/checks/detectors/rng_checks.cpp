#include "rocm_conformance_llm/checks/detectors/rng_checks.hpp"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/checks/detectors/memory.hpp"
#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"
#include "rocm_conformance_llm/faults/faults.hpp"
#include "rocm_conformance_llm/loop/loop_access.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/utils/reproducibility.hpp"

namespace rcl {

namespace {
constexpr int64_t kMaskCheckElements = 1 << 16;
constexpr double kMaskCheckDropout = 0.1;

std::string hex(uint64_t h) { return fmt::format("{:016x}", h); }
}  // namespace

uint64_t tensor_hash(const torch::Tensor& t) {
  const auto host = t.detach().to(torch::kCPU).contiguous();
  const auto* bytes = static_cast<const unsigned char*>(host.data_ptr());
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < host.nbytes(); ++i) h = (h ^ bytes[i]) * 0x100000001b3ULL;
  return h;
}

uint64_t dropout_mask_hash(const torch::Device& device, int64_t numel, double p) {
  torch::NoGradGuard no_grad;
  const auto ones = torch::ones({numel}, torch::TensorOptions().device(device));
  return tensor_hash(torch::dropout(ones, p, /*train=*/true).ne(0));
}

void skew_rng(const torch::Device& device, int rank) { dropout_mask_hash(device, 1 + rank, kMaskCheckDropout); }

uint64_t shared_seed_mask_hash(const torch::Device& device, uint64_t shared_seed, int64_t step, int rank, bool skew) {
  const RngSnapshot saved = capture_rng(device);
  seed_everything(shared_seed + static_cast<uint64_t>(step), device);
  if (skew) skew_rng(device, rank);
  const uint64_t h = dropout_mask_hash(device, kMaskCheckElements, kMaskCheckDropout);
  restore_rng(saved, device);
  return h;
}

std::optional<Finding> compare_replay(const std::vector<double>& original, const std::vector<double>& replayed,
                                      int64_t first_step, bool deterministic, double rel_tol, int rank) {
  if (original.size() != replayed.size())
    throw std::invalid_argument(
        fmt::format("compare_replay: {} original vs {} replayed losses", original.size(), replayed.size()));
  for (size_t i = 0; i < original.size(); ++i) {
    const double a = original[i], b = replayed[i];
    const double rel = std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-30});
    const bool equal = deterministic ? stats::same_bits(a, b) : rel <= rel_tol;
    if (equal) continue;
    const int64_t step = first_step + static_cast<int64_t>(i);
    return Finding{
        .component = component::rocrand,
        .signature = "replay_mismatch",
        .severity = Severity::fail,
        .step = step,
        .rank = rank,
        .message = fmt::format("replay of step {} gave loss {:.17g}, the original run {:.17g} ({})", step, b, a,
                               deterministic ? "deterministic mode: must be bitwise equal"
                                             : fmt::format("relative difference {:.3g} > {:.3g}", rel, rel_tol)),
        .evidence = {{"first_differing_step", step},
                     {"original_loss", json_number(a)},
                     {"replayed_loss", json_number(b)},
                     {"relative_difference", json_number(rel)},
                     {"deterministic", deterministic},
                     {"rel_tolerance", rel_tol},
                     {"steps_compared", original.size()}}};
  }
  return std::nullopt;
}

std::optional<Finding> check_mask_hashes_across_ranks(const std::vector<uint64_t>& hash_per_rank, int64_t step) {
  std::map<uint64_t, int> votes;
  for (uint64_t h : hash_per_rank) ++votes[h];
  if (votes.size() <= 1) return std::nullopt;
  uint64_t majority = hash_per_rank.front();
  for (const auto& [h, n] : votes)
    if (n > votes[majority]) majority = h;
  std::vector<int> differing;
  auto hashes = nlohmann::json::array();
  for (size_t r = 0; r < hash_per_rank.size(); ++r) {
    hashes.push_back(hex(hash_per_rank[r]));
    if (hash_per_rank[r] != majority) differing.push_back(static_cast<int>(r));
  }
  return Finding{
      .component = component::rocrand,
      .signature = "dropout_mask_rank_mismatch",
      .severity = Severity::fail,
      .step = step,
      .rank = differing.front(),
      .message = fmt::format("dropout masks drawn from a shared seed differ on rank(s) {} of {}",
                             nlohmann::json(differing).dump(), hash_per_rank.size()),
      .evidence = {{"hash_per_rank", hashes}, {"differing_ranks", differing}, {"majority_hash", hex(majority)}}};
}

std::optional<Finding> check_shared_seed_masks(const torch::Device& device, uint64_t shared_seed, int64_t step,
                                               int rank, bool skew, const GatherValues& gather) {
  const uint64_t mine = shared_seed_mask_hash(device, shared_seed, step, rank, skew);
  const auto halves = gather({static_cast<double>(mine >> 32), static_cast<double>(mine & 0xffffffffULL)});
  std::vector<uint64_t> per_rank;
  for (const auto& h : halves)
    per_rank.push_back((static_cast<uint64_t>(h.at(0)) << 32) | static_cast<uint64_t>(h.at(1)));
  return check_mask_hashes_across_ranks(per_rank, step);
}

std::optional<Finding> compare_mask_generations(uint64_t first, uint64_t regenerated, const std::string& context,
                                                int64_t step, int rank) {
  if (first == regenerated) return std::nullopt;
  return Finding{
      .component = component::rocrand,
      .signature = "dropout_mask_not_reproducible",
      .severity = Severity::fail,
      .step = step,
      .rank = rank,
      .message = fmt::format("the dropout mask regenerated from the restored RNG state differs "
                             "({} boundary)",
                             context),
      .evidence = {{"context", context}, {"first_hash", hex(first)}, {"regenerated_hash", hex(regenerated)}}};
}

std::optional<Finding> check_rng_restore(const torch::Device& device, int64_t step, int rank, bool skew) {
  const RngSnapshot before = capture_rng(device);
  const uint64_t first = dropout_mask_hash(device, kMaskCheckElements, kMaskCheckDropout);
  restore_rng(before, device);
  if (skew) skew_rng(device, rank);
  const uint64_t again = dropout_mask_hash(device, kMaskCheckElements, kMaskCheckDropout);
  restore_rng(before, device);
  return compare_mask_generations(first, again, "rng_state_restore", step, rank);
}

ReplayCheck::ReplayCheck(const DiagnosticsConfig& cfg, FindingLog& log, LoopAccess& loop, const FaultPlan* faults,
                         GatherValues all_gather)
    : Detector(cfg, log),
      loop_(loop),
      faults_(faults),
      scratch_dir_((loop.ctx().output_dir.empty() ? std::filesystem::temp_directory_path() : loop.ctx().output_dir) /
                   fmt::format(".replay-checkpoint-rank-{}-pid-{}", loop.rank(), ::getpid())),
      all_gather_(std::move(all_gather)) {}

ReplayCheck::~ReplayCheck() {
  std::error_code ignored;
  std::filesystem::remove_all(scratch_dir_, ignored);
}

bool ReplayCheck::skewed(FaultKind kind) const {
  return faults_ && pending_ && faults_->fires(kind, pending_->saved_step, loop_.rank());
}

bool ReplayCheck::compares_bitwise() const { return determinism_of(loop_.ctx().cfg) != Determinism::off; }

void ReplayCheck::deterministic_around_replay(bool on) {
  if (determinism_of(loop_.ctx().cfg) == Determinism::replay) set_deterministic(on);
}

bool ReplayCheck::any_rank(bool mine) {
  if (loop_.world_size() == 1) return mine;
  return loop_.mean_across_ranks(mine ? 1.0 : 0.0) > 0;
}

void ReplayCheck::settle(int64_t step) {
  if (!pending_ || !pending_->judged) return;
  // Any rank's mismatch makes every rank re-run: the replayed steps all-reduce gradients.
  if (any_rank(pending_->mismatch.has_value())) {
    loop_.enter_phase(phase::replay, step);
    classify_and_report(pending_->mismatch.value_or(Finding{}));
  }
  std::filesystem::remove_all(scratch_dir_);
  pending_.reset();
  deterministic_around_replay(false);
}

// A replay that ends with the run's last step is judged only after it.
void ReplayCheck::finish() { settle(loop_.ctx().cfg.steps); }

void ReplayCheck::between_steps(int64_t step) {
  settle(step);
  const auto& cfg = loop_.ctx().cfg;
  if (step % cfg.replay_check_interval != 0 || step + cfg.replay_steps > cfg.steps || pending_) return;
  loop_.enter_phase(phase::replay, step);
  const auto& device = loop_.ctx().device;
  const int rank = loop_.rank();
  const bool skew = faults_ && faults_->fires(FaultKind::rng_skew, step, rank);
  report(check_rng_restore(device, step, rank, skew));
  if (all_gather_) report(check_shared_seed_masks(device, cfg.seed, step, rank, skew, all_gather_));

  // With replay_snapshot disk, saved and reloaded through the checkpoint writer and loader
  // (safetensors files), so the memory figure after the reload is the real loader's.
  const MemorySample before_save = sample_memory(device);
  // Both runs of the compared steps (and any re-run) under deterministic algorithms; settle()
  // switches them off again.
  deterministic_around_replay(true);
  Pending replay{.saved_step = step, .first_step = step + 1, .saved = save_state(scratch_dir_)};
  for (int64_t i = 0; i < cfg.replay_steps; ++i) replay.first_run.push_back(loop_.run_unpublished_step().loss);
  load_state(replay.saved);
  // The reload restored a stale generator state: on every reload (rng-skew), or this once.
  if (skew || (faults_ && faults_->fires(FaultKind::rng_skew_once, step, rank))) skew_rng(device, rank);
  report(check_memory_after_reload(before_save, sample_memory(device), cfg_, step, rank));
  if (replay.saved.on_disk)
    spdlog::info("replay check: state at step {} saved to {} and reloaded by the checkpoint loader", step,
                 scratch_dir_.string());
  else
    spdlog::info("replay check: state at step {} copied to host memory and back", step);
  pending_ = std::move(replay);
}

ReplayCheck::SavedState ReplayCheck::save_state(const std::filesystem::path& dir) {
  if (loop_.ctx().cfg.replay_snapshot == ReplaySnapshot::disk) return {.on_disk = loop_.save_private_checkpoint(dir)};
  return {.in_memory = loop_.snapshot_to_host()};
}

void ReplayCheck::load_state(const SavedState& saved) {
  if (saved.on_disk)
    loop_.load_private_checkpoint(*saved.on_disk);
  else
    loop_.restore(*saved.in_memory);
}

void ReplayCheck::on_loss(int64_t step, double local_loss) {
  if (!pending_ || pending_->judged || step < pending_->first_step) return;
  pending_->second_run.push_back(local_loss);
  if (pending_->second_run.size() < pending_->first_run.size()) return;
  const bool bitwise = compares_bitwise();
  pending_->mismatch = compare_replay(pending_->first_run, pending_->second_run, pending_->first_step, bitwise,
                                      cfg_.replay_rel_tolerance, loop_.rank());
  pending_->judged = true;
  if (!pending_->mismatch)
    spdlog::info("replay check: steps {}..{} reproduced {}", pending_->first_step, step,
                 bitwise ? "bitwise" : fmt::format("within {:g}", cfg_.replay_rel_tolerance));
}

std::vector<double> ReplayCheck::replay_from_saved(bool fp32, bool skew) {
  const auto now = save_state(scratch_dir_ / "now");
  load_state(pending_->saved);
  if (skew) skew_rng(loop_.ctx().device, loop_.rank());
  std::vector<double> losses;
  for (size_t i = 0; i < pending_->first_run.size(); ++i) losses.push_back(loop_.run_unpublished_step(fp32).loss);
  load_state(now);
  if (now.on_disk) std::filesystem::remove_all(now.on_disk->dir);
  return losses;
}

void ReplayCheck::classify_and_report(Finding mismatch) {
  const auto& p = *pending_;
  const bool bitwise = compares_bitwise();
  const int rank = loop_.rank();
  const auto unequal = [&](const std::vector<double>& a, const std::vector<double>& b) {
    return compare_replay(a, b, p.first_step, bitwise, cfg_.replay_rel_tolerance, rank).has_value();
  };
  // A persistent rng-skew is a broken restore: every reload of the re-run meets it too.
  const bool skew = skewed(FaultKind::rng_skew);
  RerunOutcome outcome{.reproducible = unequal(p.first_run, replay_from_saved(false, skew))};
  if (any_rank(outcome.reproducible)) {
    // Under bf16/fp16 both runs once more in float32 (the first without the reload's fault).
    outcome.also_in_fp32 = loop_.ctx().cfg.mixed_precision == Precision::fp32
                               ? true
                               : unequal(replay_from_saved(true, false), replay_from_saved(true, skew));
  }
  if (!p.mismatch) return;  // this rank's runs agreed: it only took part in the others' re-run
  if (!outcome.reproducible) outcome.also_in_fp32.reset();  // run for another rank
  transients_.apply(mismatch, outcome);
  report(std::move(mismatch));
}

}  // namespace rcl
