// The decoder's parameters under Hugging Face names, as the checkpoints' model.safetensors and
// config.json store them (docs/checkpoints.md). The decoder maps onto a Hugging Face architecture
// when it computes what that one computes:
//   GPT-2 (GPT2LMHeadModel): learned positions, LayerNorm before each branch, GELU;
//   Llama (LlamaForCausalLM): rotary positions in the "rotate half" form, RMSNorm before each
//     branch, SwiGLU (silu(gate) * up); our Linear biases load through Llama's attention_bias
//     and mlp_bias (transformers >= 4.41).
// Neither with Q/K norm, a Q/K/V convolution or mixture-of-experts feed-forwards (Mixtral's
// experts have no biases and no GELU); the LM head is tied to the embedding in both. Any other
// layout keeps the model's own names ("native"). Beside them the export carries the data's
// tokenizer where the data names one (an indexed dataset's sidecar), so transformers loads model
// and tokenizer from one folder.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/config.hpp"

namespace rcl {

enum class HfLayout { native, gpt2, llama };
const char* to_string(HfLayout layout);  // "native", "gpt2", "llama": state.json's "weights"
HfLayout hf_layout_of(const TrainingConfig& cfg);

// One parameter's names in model.safetensors. A fused tensor is stored as row blocks, one name
// each (Llama: Q, K, V of attn.qkv, K and V narrower under grouped-query attention; gate and up
// of SwiGLU's mlp.up, equal halves in that order: the first goes through silu). GPT-2's Conv1D
// stores a Linear weight transposed ([in, out]).
struct StoredNames {
  std::vector<std::string> names{};  // one per row block of the parameter
  std::vector<int64_t> rows{};       // the blocks' rows
  bool transpose = false;
};

// Each of `params`' (the model's named_parameters) names in model.safetensors, with the rows of
// each block: Q, K, V's widths for the three blocks of attn.qkv, equal shares otherwise.
// std::logic_error for a parameter `layout` has no name for.
using NamedParameters = torch::OrderedDict<std::string, torch::Tensor>;
std::vector<std::pair<std::string, StoredNames>> stored_names(const TrainingConfig& cfg, const NamedParameters& params,
                                                              HfLayout layout);

// config.json's model fields for `layout` (our own model_type "rcl-gpt" for native).
nlohmann::json hf_config(const TrainingConfig& cfg, HfLayout layout);
// The data's special tokens, so transformers neither warns about nor generates with its
// architecture's defaults (GPT-2's 50256 lies outside a byte vocabulary): the byte tokenizer's
// for a text file; an indexed dataset's from its sidecar (each null where it names none, all
// null without a sidecar); none for the synthetic corpus.
nlohmann::json special_token_ids(const TrainingConfig& cfg);

inline constexpr const char* kHfTokenizerFile = "tokenizer.json";
inline constexpr const char* kHfTokenizerConfigFile = "tokenizer_config.json";
// What a checkpoint's export carries of the data's tokenizer, read once when the run starts
// (every checkpoint writes the same): config.json's special ids (special_token_ids), the
// tokenizer.json an indexed dataset's sidecar names, only while its SHA-256 is the sidecar's (else
// the shards' ids are not its ids), and the tokenizer_config.json beside it, or a minimal one
// naming the special tokens.
struct HfTokenizer {
  nlohmann::json special_ids;
  // What state.json records: null where the data names no tokenizer file; else {"source",
  // "sha256", "copied", and "tokenizer_config" ("copied" / "written") or "why" not}.
  nlohmann::json record;
  std::string tokenizer_json;  // the two files' bytes, where copied
  std::string tokenizer_config;
};
HfTokenizer read_hf_tokenizer(const TrainingConfig& cfg);
// Writes `tokenizer`'s files into the export folder `dir` and returns its record. One not copied
// (a missing or changed file) is a warning naming it, and nothing is written.
nlohmann::json export_tokenizer(const HfTokenizer& tokenizer, const std::filesystem::path& dir);

}  // namespace rcl
