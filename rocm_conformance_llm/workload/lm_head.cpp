#include "rocm_conformance_llm/workload/lm_head.hpp"

#include <vector>

#include "rocm_conformance_llm/workload/gemm_checks.hpp"
#include "rocm_conformance_llm/workload/op_tap.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"

namespace rcl {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// 64 rows: every GEMM tile and vector width of rocBLAS/hipBLASLt divides it (50257 divides none).
constexpr int64_t kVocabAlignment = 64;

// The padded table in the dtype the head's GEMM computes in, cast once rather than per chunk.
torch::Tensor head_weight(const torch::Tensor& table) {
  auto weight = padded_head_weight(table);
  const auto autocast = current_autocast(table.device().type());
  return autocast.enabled && weight.scalar_type() == torch::kFloat ? weight.to(autocast.dtype) : weight;
}

// Summed cross-entropy of one chunk's logits [n, padded] over the first `vocab` columns, in >= float32.
torch::Tensor chunk_loss_sum(const torch::Tensor& logits, const torch::Tensor& targets, int64_t vocab) {
  const auto real = logits.narrow(-1, 0, vocab).to(at::promote_types(logits.scalar_type(), torch::kFloat));
  return torch::nn::functional::cross_entropy(
      real, targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
}

// Runs fn(chunk index, first token, tokens) over [0, total) in chunks of `chunk`.
template <typename Fn>
void for_each_chunk(int64_t total, int64_t chunk, Fn fn) {
  for (int64_t i = 0, start = 0; start < total; ++i, start += chunk) fn(i, start, std::min(chunk, total - start));
}

// A chunk whose forward graph is kept, back to its hidden rows and the head weight: one its hook
// changed, or the only chunk, whose logits a recompute would rebuild at backward's start, where
// the kept ones still are (no memory saved, one head GEMM more a step).
struct KeptChunk {
  int64_t index;
  torch::Tensor loss, hidden;
};

// What backward needs besides the saved tensors. Held in a capsule: the context stores IValues only.
struct ChunkedLoss : torch::CustomClassHolder {
  LogitsHook hook;
  int64_t chunk = 0;
  AutocastState autocast;
  GemmObserver* gemms = nullptr;  // the recomputed GEMMs are the step's too
  std::vector<KeptChunk> kept;
  torch::Tensor kept_weight;  // the forward's head weight, where a chunk was kept
};

struct ChunkedLossFunction : torch::autograd::Function<ChunkedLossFunction> {
  // Function::apply runs this with gradients off; they are on per chunk only for the head and
  // its hook; of several chunks, an unhooked one's graph is dropped at once: its logits are not kept.
  static torch::Tensor forward(AutogradContext* ctx, c10::intrusive_ptr<ChunkedLoss> state,
                               const torch::Tensor& hidden, const torch::Tensor& table, const torch::Tensor& targets) {
    state->autocast = current_autocast(hidden.device().type());
    state->gemms = armed_gemm_observer();
    ctx->save_for_backward({hidden, table, targets});
    const torch::AutoGradMode grad_enabled(true);
    const auto weight = head_weight(table.detach().requires_grad_(true));
    const bool only_chunk = hidden.size(0) <= state->chunk;
    torch::Tensor total;
    for_each_chunk(hidden.size(0), state->chunk, [&](int64_t i, int64_t start, int64_t n) {
      const auto h = hidden.narrow(0, start, n).detach().requires_grad_(true);
      const auto t = targets.narrow(0, start, n);
      const auto logits = tapped_linear(h, weight, {}, "lm_head");
      const auto hooked = state->hook ? state->hook(logits) : logits;
      torch::Tensor sum;
      if (hooked.is_same(logits) && !only_chunk) {
        const torch::NoGradGuard no_grad;
        sum = chunk_loss_sum(logits.detach(), t, table.size(0));
      } else {
        sum = chunk_loss_sum(hooked, t, table.size(0));
        state->kept.push_back({i, sum, h});
        state->kept_weight = weight;
        sum = sum.detach();
      }
      total = total.defined() ? total + sum : sum;
    });
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    return total / double(hidden.size(0));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto state = c10::static_intrusive_pointer_cast<ChunkedLoss>(ctx->saved_data["state"].toCapsule());
    const auto saved = ctx->get_saved_variables();
    const auto &hidden = saved[0], &table = saved[1], &targets = saved[2];
    const auto scale = grad_outputs[0] / double(hidden.size(0));
    auto grad_hidden = torch::zeros_like(hidden);
    torch::Tensor grad_weight;  // float32 over the padded rows, summed over the chunks
    {
      const torch::AutoGradMode grad_enabled(true);
      const AutocastGuard autocast(hidden.device().type(), state->autocast);
      const ObservedGemms gemms(state->gemms);
      const GemmLayerScope head(-1);
      const auto weight = head_weight(table.detach()).requires_grad_(true);
      size_t next_kept = 0;
      for_each_chunk(hidden.size(0), state->chunk, [&](int64_t i, int64_t start, int64_t n) {
        variable_list grads;
        if (next_kept < state->kept.size() && state->kept[next_kept].index == i) {
          const auto& kept = state->kept[next_kept++];
          grads = torch::autograd::grad({kept.loss}, {kept.hidden, state->kept_weight}, {scale},
                                        /*retain_graph=*/true);
        } else {
          const auto h = hidden.narrow(0, start, n).detach().requires_grad_(true);
          const auto sum = chunk_loss_sum(tapped_linear(h, weight, {}, "lm_head"), targets.narrow(0, start, n),
                                          table.size(0));
          grads = torch::autograd::grad({sum}, {h, weight}, {scale});
        }
        grad_hidden.narrow(0, start, n).copy_(grads[0]);
        const auto g = grads[1].to(at::promote_types(grads[1].scalar_type(), torch::kFloat));
        grad_weight = grad_weight.defined() ? grad_weight.add_(g) : g;
      });
    }
    state->kept.clear();
    state->kept_weight = torch::Tensor();
    return {torch::Tensor(), grad_hidden, grad_weight.narrow(0, 0, table.size(0)).to(table.scalar_type()),
            torch::Tensor()};
  }
};

}  // namespace

int64_t padded_vocab(int64_t vocab) { return (vocab + kVocabAlignment - 1) / kVocabAlignment * kVocabAlignment; }

torch::Tensor padded_head_weight(const torch::Tensor& table) {
  const int64_t pad = padded_vocab(table.size(0)) - table.size(0);
  return pad == 0 ? table : at::constant_pad_nd(table, {0, 0, 0, pad});
}

torch::Tensor chunked_lm_loss(const torch::Tensor& hidden, const torch::Tensor& table, const torch::Tensor& targets,
                              const LogitsHook& on_logits, int64_t chunk_tokens) {
  TORCH_CHECK(hidden.dim() == 2 && targets.dim() == 1 && hidden.size(0) == targets.size(0) && chunk_tokens > 0,
              "chunked_lm_loss: hidden [N, C], targets [N], chunk_tokens > 0");
  auto state = c10::make_intrusive<ChunkedLoss>();
  state->hook = on_logits;
  state->chunk = chunk_tokens;
  if (torch::GradMode::is_enabled() && (hidden.requires_grad() || table.requires_grad()))
    return ChunkedLossFunction::apply(state, hidden, table, targets);
  // Nothing to differentiate (evaluation): the chunks' losses, no graph.
  const auto weight = head_weight(table);
  torch::Tensor total;
  for_each_chunk(hidden.size(0), chunk_tokens, [&](int64_t, int64_t start, int64_t n) {
    auto logits = tapped_linear(hidden.narrow(0, start, n), weight, {}, "lm_head");
    if (on_logits) logits = on_logits(logits);
    const auto sum = chunk_loss_sum(logits, targets.narrow(0, start, n), table.size(0));
    total = total.defined() ? total + sum : sum;
  });
  return total / double(hidden.size(0));
}

}  // namespace rcl
