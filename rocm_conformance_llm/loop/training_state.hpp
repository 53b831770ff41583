// The training state's checkpoint files: what a step reads, on disk (docs/checkpoints.md).
//
//   model.safetensors      weights; Hugging Face GPT-2 or Llama tensor names where the model
//                          computes what that architecture computes
//   config.json            Hugging Face style model config
//   tokenizer.json, tokenizer_config.json  the data's tokenizer, where it names one (hf_names.hpp)
//   optimizer.safetensors  AdamW moments (flat, in the optimizer's buffer order)
//   optimizer-shard-<R>.safetensors  instead, where the optimizer is sharded (ZeRO, FSDP): rank
//                          R's shard of the moments, written by that rank (under FSDP the
//                          weights are gathered from every rank's shards for model.safetensors)
//   rank-<R>.safetensors   each rank's RNG states (CPU generator, device generator)
//   state.json             step, data cursor, optimizer steps, loss scaler, weights layout, the
//                          tokenizer's export, and what the writer says about the run
//
// The run's checkpoints (run/run_checkpoint.hpp) add findings and a manifest around these; the
// replay check writes them alone as a private checkpoint (LoopAccess).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/loop/loop_access.hpp"

namespace rcl {

inline constexpr const char* kCheckpointFormat = "rocm-conformance-llm checkpoint";
inline constexpr int kCheckpointVersion = 1;
inline constexpr const char* kStateFile = "state.json";
inline constexpr const char* kWeightsFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kHfConfigFile = "config.json";
std::string rank_state_file(int rank);        // rank-<R>.safetensors
std::string optimizer_shard_file(int index);  // optimizer-shard-<R>.safetensors
std::string model_shard_file(int rank);       // model-shard-<R>.safetensors
// The optimizer files a checkpoint whose state.json is `state` must hold: one per shard
// ("optimizer_shards", absent before sharding existed: 1).
std::vector<std::string> optimizer_files(const nlohmann::json& state);
// Every weight and optimizer file it must hold: model.safetensors and config.json, or, for a
// model split across ranks ("model_shards" > 1), each rank's model-shard-<R>.safetensors; then
// the optimizer files.
std::vector<std::string> weight_and_optimizer_files(const nlohmann::json& state);

// A checkpoint's JSON file; CheckpointError when it is missing or not JSON.
nlohmann::json read_checkpoint_json(const std::filesystem::path& path);

// Writes `snap` (taken from `loop`) into `dir`: this rank's RNG states (and its shard of the
// optimizer moments where they are sharded); with `shared` (one rank of a run, or a private
// checkpoint) also the weights, the unsharded optimizer moments, Hugging Face config and
// state.json, which holds `run_fields` beside the training state's own. A model split across
// ranks (tensor or expert parallel): every rank writes its own weights (model-shard-<R>, native
// names) and moments (optimizer-shard-<R>), and no Hugging Face export is written.
void write_training_state(LoopAccess& loop, const LoopAccess::Snapshot& snap, const std::filesystem::path& dir,
                          bool shared, const nlohmann::json& run_fields);

// The state in `dir` as a snapshot of `loop` (the weights already copied into its parameters;
// the update guard as it is now): optimizer moments, loss scaler, this rank's RNG states, step
// counter and data cursor. CheckpointError when names, shapes or dtypes differ.
LoopAccess::Snapshot read_training_state(LoopAccess& loop, const std::filesystem::path& dir);

// Loads a verified checkpoint into a freshly built loop (read_training_state, restored). The
// next step it runs is the checkpoint's step + 1, bit for bit what the uninterrupted run computed
// (on CPU; docs/checkpoints.md). Load it after everything else that draws random numbers at
// start-up (detector preflights), so the next step draws exactly what it drew in the
// uninterrupted run.
void load_training_state(LoopAccess& loop, const std::filesystem::path& dir);

}  // namespace rcl
