#include "rocm_conformance_llm/loop/training_state.hpp"

#include <fstream>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/files.hpp"
#include "rocm_conformance_llm/base/safetensors.hpp"
#include "rocm_conformance_llm/transport/parallelize.hpp"
#include "rocm_conformance_llm/workload/hf_names.hpp"

namespace rcl {
namespace fs = std::filesystem;

namespace {

// Which optimizer file of how many this rank's moments go to: ZeRO's shard, or, a model split
// across ranks, one per rank (the ranks of a tensor-parallel group share a ZeRO shard index).
ShardOf optimizer_files_of(LoopAccess& loop, const LoopAccess::Snapshot& snap) {
  if (loop.model()->parallel().splits_model()) return {loop.rank(), loop.world_size()};
  return snap.optimizer_shard;
}

torch::Tensor require(const SafetensorsFile& file, const std::string& name, const fs::path& path, c10::ScalarType dtype,
                      std::optional<std::vector<int64_t>> shape = std::nullopt) {
  const auto it = file.tensors.find(name);
  if (it == file.tensors.end())
    throw CheckpointError(fmt::format("checkpoint {}: no tensor '{}'", path.string(), name));
  const auto& t = it->second;
  if (t.scalar_type() != dtype || (shape && t.sizes().vec() != *shape))
    throw CheckpointError(fmt::format("checkpoint {}: tensor '{}' is {} {} where this model has {} {}", path.string(),
                                      name, c10::toString(t.scalar_type()), c10::str(t.sizes()), c10::toString(dtype),
                                      shape ? c10::str(c10::IntArrayRef(*shape)) : c10::str(t.sizes())));
  return t;
}

}  // namespace

std::string rank_state_file(int rank) { return fmt::format("rank-{}.safetensors", rank); }
std::string optimizer_shard_file(int index) { return fmt::format("optimizer-shard-{}.safetensors", index); }

std::string model_shard_file(int rank) { return fmt::format("model-shard-{}.safetensors", rank); }

std::vector<std::string> weight_and_optimizer_files(const nlohmann::json& state) {
  const int model_shards = state.is_object() ? state.value("model_shards", 1) : 1;
  std::vector<std::string> files;
  if (model_shards > 1)
    for (int r = 0; r < model_shards; ++r) files.push_back(model_shard_file(r));
  else files = {kWeightsFile, kHfConfigFile};
  for (auto& f : optimizer_files(state)) files.push_back(std::move(f));
  return files;
}

std::vector<std::string> optimizer_files(const nlohmann::json& state) {
  const int shards = state.is_object() ? state.value("optimizer_shards", 1) : 1;
  if (shards <= 1) return {kOptimizerFile};
  std::vector<std::string> files;
  for (int i = 0; i < shards; ++i) files.push_back(optimizer_shard_file(i));
  return files;
}

nlohmann::json read_checkpoint_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw CheckpointError("checkpoint " + path.parent_path().string() + ": missing " + path.filename().string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError("checkpoint " + path.parent_path().string() + ": " + path.filename().string() +
                          " is not valid JSON (" + e.what() + ")");
  }
}

void write_training_state(LoopAccess& loop, const LoopAccess::Snapshot& snap, const fs::path& dir, bool shared,
                          const nlohmann::json& run_fields) {
  std::vector<std::pair<std::string, torch::Tensor>> rng{{"rng.cpu", snap.rng.cpu_state}};
  if (snap.rng.device_state.defined()) rng.emplace_back("rng.device", snap.rng.device_state);
  write_safetensors(dir / rank_state_file(loop.rank()), rng);
  const std::vector<std::pair<std::string, torch::Tensor>> moments{{"exp_avg", snap.optimizer.exp_avg},
                                                                   {"exp_avg_sq", snap.optimizer.exp_avg_sq}};
  const ShardOf files = optimizer_files_of(loop, snap);
  const bool sharded = files.count > 1;
  if (sharded) write_safetensors(dir / optimizer_shard_file(files.index), moments);
  // A split model: this rank's shard (what a resume reads), and the whole model gathered from
  // the shards (a collective: every rank) for the export.
  const bool split = loop.model()->parallel().splits_model();
  std::vector<std::pair<std::string, torch::Tensor>> whole;
  if (split) {
    std::vector<std::pair<std::string, torch::Tensor>> mine;
    for (const auto& item : loop.model()->named_parameters()) mine.emplace_back(item.key(), item.value());
    write_safetensors(dir / model_shard_file(loop.rank()), mine, {{"format", "pt"}});
    whole = gather_full_parameters(loop.model());
  }
  const GatheredParameters full(loop.model()->fsdp());  // FSDP: on every rank; rank 0 writes it
  if (!shared) return;
  const auto& cfg = loop.ctx().cfg;
  const HfLayout layout = hf_layout_of(cfg);
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  auto params = loop.model()->named_parameters();
  for (const auto& [native, stored] : stored_names(cfg, params, layout)) {
    torch::Tensor value = params[native];
    for (const auto& [name, full] : whole)
      if (name == native) value = full;
    std::vector<int64_t> rows = stored.rows;
    if (split && rows.size() != 3)  // measured on this rank's shard; Q, K, V's are the config's
      rows.assign(rows.size(), value.size(0) / static_cast<int64_t>(rows.size()));
    const auto blocks = value.split_with_sizes(rows, 0);
    for (size_t i = 0; i < blocks.size(); ++i)
      weights.emplace_back(stored.names[i], stored.transpose ? blocks[i].t() : blocks[i]);
  }
  write_safetensors(dir / kWeightsFile, weights, {{"format", "pt"}});
  const HfTokenizer& hf_tokenizer = *loop.ctx().hf_tokenizer;
  auto model_config = hf_config(cfg, layout);
  model_config.update(hf_tokenizer.special_ids);
  write_file_synced(dir / kHfConfigFile, {model_config.dump(2) + "\n"});
  const auto tokenizer = export_tokenizer(hf_tokenizer, dir);
  if (!sharded) write_safetensors(dir / kOptimizerFile, moments);
  nlohmann::json scaler = nullptr;
  if (snap.scaler) {
    const auto s = snap.scaler->state();
    scaler = {{"scale", s.scale}, {"clean_streak", s.clean_streak}, {"skipped_steps", s.skipped_steps}};
  }
  nlohmann::json state = {{"format", kCheckpointFormat},
                          {"version", kCheckpointVersion},
                          {"step", snap.step},
                          {"micro_batches", snap.micro_batches},
                          {"optimizer_steps", snap.optimizer.steps},
                          {"loss_scaler", scaler},
                          {"weights", to_string(layout)},
                          {"optimizer_shards", files.count},
                          {"model_shards", split ? loop.world_size() : 1},
                          {"tokenizer", tokenizer}};
  state.update(run_fields);
  write_file_synced(dir / kStateFile, {state.dump(2) + "\n"});
}

LoopAccess::Snapshot read_training_state(LoopAccess& loop, const fs::path& dir) {
  const auto state = read_checkpoint_json(dir / kStateFile);
  const auto& cfg = loop.ctx().cfg;
  const bool split = loop.model()->parallel().splits_model();
  const HfLayout layout = hf_layout_of(cfg);
  if (state.value("weights", "") != to_string(layout))
    throw CheckpointError("checkpoint " + dir.string() + ": state.json's weights layout does not fit this model");
  const int model_shards = state.value("model_shards", 1);
  if (model_shards != (split ? loop.world_size() : 1))
    throw CheckpointError(fmt::format("checkpoint {}: model weights in {} shards (this run: {})", dir.string(),
                                      model_shards, split ? loop.world_size() : 1));
  torch::NoGradGuard no_grad;
  // Weights: by name, shape and dtype, into the parameters (views of the optimizer's flat buffer;
  // under FSDP gathered, and this rank's shards kept from them).
  const fs::path weights_path = dir / (split ? model_shard_file(loop.rank()) : kWeightsFile);
  const auto weights = read_safetensors(weights_path);
  {
    GatheredParameters full(loop.model()->fsdp());
    auto params = loop.model()->named_parameters();
    const auto names = stored_names(cfg, params, split ? HfLayout::native : layout);  // a shard: native names
    size_t stored_tensors = 0;
    for (const auto& [native, stored] : names) stored_tensors += stored.names.size();
    if (weights.tensors.size() != stored_tensors)
      throw CheckpointError(fmt::format("checkpoint {}: {} holds {} tensors, this model stores {}", dir.string(),
                                        weights_path.filename().string(), weights.tensors.size(), stored_tensors));
    for (const auto& [native, stored] : names) {
      auto& param = params[native];
      std::vector<torch::Tensor> blocks;
      for (size_t i = 0; i < stored.names.size(); ++i) {
        auto shape = param.sizes().vec();
        shape[0] = stored.rows[i];
        if (stored.transpose) std::swap(shape[0], shape[1]);
        const auto& name = stored.names[i];
        const auto t = require(weights, name, weights_path, param.scalar_type(), shape);
        blocks.push_back(stored.transpose ? t.t() : t);
      }
      param.copy_(torch::cat(blocks, 0));
    }
    full.keep_values();
  }
  // Everything else a step reads, into the loop's own snapshot (the caller restores it).
  auto snap = loop.snapshot();
  const int shards_then = state.value("optimizer_shards", 1);
  const ShardOf files = optimizer_files_of(loop, snap);
  if (shards_then != files.count)
    throw CheckpointError(fmt::format("checkpoint {}: optimizer state in {} shards (this run: {})", dir.string(),
                                      shards_then, files.count));
  const fs::path optimizer_path = dir / optimizer_files(state).at(files.index);
  const auto optimizer = read_safetensors(optimizer_path);
  const std::vector<int64_t> flat{snap.optimizer.exp_avg.numel()};
  snap.optimizer.exp_avg = require(optimizer, "exp_avg", optimizer_path, snap.optimizer.exp_avg.scalar_type(), flat);
  snap.optimizer.exp_avg_sq =
      require(optimizer, "exp_avg_sq", optimizer_path, snap.optimizer.exp_avg_sq.scalar_type(), flat);
  const fs::path rank_path = dir / rank_state_file(loop.rank());
  const auto rng = read_safetensors(rank_path);
  snap.rng.cpu_state = require(rng, "rng.cpu", rank_path, c10::ScalarType::Byte);
  if (const auto it = rng.tensors.find("rng.device"); it != rng.tensors.end()) snap.rng.device_state = it->second;
  try {
    snap.step = state.at("step").get<int64_t>();
    snap.micro_batches = state.at("micro_batches").get<int64_t>();
    snap.optimizer.steps = state.at("optimizer_steps").get<int64_t>();
    const auto& scaler = state.at("loss_scaler");
    if (snap.scaler.has_value() != !scaler.is_null())
      throw CheckpointError("checkpoint " + dir.string() + ": loss scaler state does not fit this precision");
    if (snap.scaler)
      snap.scaler->load_state({scaler.at("scale").get<double>(), scaler.at("clean_streak").get<int64_t>(),
                               scaler.at("skipped_steps").get<int64_t>()});
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError("checkpoint " + dir.string() + ": state.json: " + e.what());
  }
  return snap;
}

void load_training_state(LoopAccess& loop, const fs::path& dir) { loop.restore(read_training_state(loop, dir)); }

}  // namespace rcl
