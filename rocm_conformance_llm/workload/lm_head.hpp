// The LM head and its loss without the whole batch's float32 logits: the tied token table padded
// to a vocabulary that is a multiple of 64 rows (aligned GEMMs; the pad rows are zeros, no
// parameter, never trained), and the cross-entropy computed over chunks of tokens, each chunk's
// logits recomputed in backward (but a lone chunk's). Checkpoints and exports keep the real
// [vocab, hidden] table.
#pragma once

#include <cstdint>
#include <functional>

#include <torch/torch.h>

namespace rcl {

// The LM head's GEMMs run over this many rows: `vocab` rounded up to a multiple of 64.
int64_t padded_vocab(int64_t vocab);

// The table [vocab, hidden] with zero rows appended up to padded_vocab (under autograd: the
// gradient reaches the real rows only).
torch::Tensor padded_head_weight(const torch::Tensor& table);

// A chunk's logits [tokens, padded_vocab] in, the logits its loss takes out (a fault may change
// them; the shadow check hears that the forward is done). Called once per chunk, in order.
using LogitsHook = std::function<torch::Tensor(torch::Tensor)>;

// The LM head's tokens per chunk: a bf16 chunk's float32 logits stay under ~0.5 GB at GPT-2's
// vocabulary while its GEMM stays large.
inline constexpr int64_t kLossChunkTokens = 2048;

// Mean cross-entropy of hidden [N, C] through the tied head `table` [vocab, C] against targets
// [N], over the real vocabulary only (the pad columns are out of the softmax). Each chunk of
// `chunk_tokens` runs the head through tapped_linear (site "lm_head", the GEMM observers see it,
// forward and backward); in backward an unhooked chunk's logits are recomputed, a chunk its hook
// changed, or the only chunk, keeps its graph from the forward. Float32 result.
torch::Tensor chunked_lm_loss(const torch::Tensor& hidden, const torch::Tensor& table, const torch::Tensor& targets,
                              const LogitsHook& on_logits = {}, int64_t chunk_tokens = kLossChunkTokens);

}  // namespace rcl
