#include "rocm_conformance_llm/workload/fsdp.hpp"

#include <algorithm>
#include <stdexcept>

#include "rocm_conformance_llm/utils/reproducibility.hpp"
#include "rocm_conformance_llm/workload/gemm_checks.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"

namespace rcl {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t bytes_of(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// What the backward of one block needs: the unit, the block, and the forward's random and
// autocast state, so the recomputation draws the same dropout masks in the same precision, and
// the GEMM observer it ran under (the recomputed GEMMs are the step's too).
struct BlockReplay : torch::CustomClassHolder {
  FsdpBlock block;
  RngSnapshot rng;
  AutocastState autocast;
  GemmObserver* gemms = nullptr;
};

struct FsdpBlockFunction : torch::autograd::Function<FsdpBlockFunction> {
  // Function::apply runs this with gradients disabled: the block keeps no activations, and the
  // shards are inputs only so that their gradients arrive through this function's backward.
  static torch::Tensor forward(AutogradContext* ctx, c10::intrusive_ptr<BlockReplay> replay, const torch::Tensor& x,
                               const torch::Tensor& /*decayed_shard*/, const torch::Tensor& /*plain_shard*/) {
    const auto device = x.device();
    replay->rng = capture_rng(device);
    replay->autocast = current_autocast(device.type());
    replay->gemms = armed_gemm_observer();
    auto& unit = *replay->block.unit;
    unit.gather("fwd");
    torch::Tensor out = replay->block.forward(x);
    unit.release();
    ctx->save_for_backward({x});
    ctx->saved_data["replay"] = c10::IValue::make_capsule(replay);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto replay = c10::static_intrusive_pointer_cast<BlockReplay>(ctx->saved_data["replay"].toCapsule());
    const auto input = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    const auto device = input.device();
    auto& unit = *replay->block.unit;
    unit.gather("bwd");
    // The forward's generator state for the recomputation, then back to where the step's stream
    // is, so the rest of the step draws what it would have drawn without FSDP.
    const RngSnapshot after_forward = capture_rng(device);
    restore_rng(replay->rng, device);
    variable_list grads;
    {
      torch::AutoGradMode grad_enabled(true);
      AutocastGuard autocast(device.type(), replay->autocast);
      const ObservedGemms gemms(replay->gemms);
      const torch::Tensor output = replay->block.forward(input);
      restore_rng(after_forward, device);
      variable_list inputs{input};
      inputs.insert(inputs.end(), unit.parameters().begin(), unit.parameters().end());
      grads = torch::autograd::grad({output}, inputs, {grad_outputs[0]}, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
    }
    const variable_list param_grads(grads.begin() + 1, grads.end());
    auto shard_grads = unit.reduce_scatter(param_grads);
    unit.release();
    return {torch::Tensor(), grads[0], shard_grads[0], shard_grads[1]};
  }
};

}  // namespace

FsdpUnit::FsdpUnit(std::string name, std::vector<torch::Tensor> decayed, std::vector<torch::Tensor> plain,
                   std::shared_ptr<ShardGroup> group)
    : name_(std::move(name)), group_(std::move(group)) {
  int64_t decayed_numel = 0;
  for (const auto& p : decayed) decayed_numel += p.numel();
  params_ = std::move(decayed);
  params_.insert(params_.end(), plain.begin(), plain.end());
  if (params_.empty()) throw std::invalid_argument("FsdpUnit " + name_ + ": no parameters");
  std::vector<torch::Tensor> flat;
  for (const auto& p : params_) {
    shapes_.push_back(p.sizes().vec());
    flat.push_back(p.detach().reshape({-1}));
    total_ += p.numel();
  }
  const int n = group_->size();
  chunk_ = (total_ + n - 1) / n;
  const int64_t begin = chunk_ * group_->rank();
  decayed_in_chunk_ = std::clamp<int64_t>(decayed_numel - begin, 0, chunk_);
  torch::NoGradGuard no_grad;
  // Every rank built the same model from the same seed: its chunk is cut from its own copy.
  auto padded = torch::zeros({chunk_ * n}, params_.front().options());
  padded.narrow(0, 0, total_).copy_(torch::cat(flat));
  const auto mine = padded.narrow(0, begin, chunk_);
  decayed_shard_ = mine.narrow(0, 0, decayed_in_chunk_).clone().requires_grad_(true);
  plain_shard_ = mine.narrow(0, decayed_in_chunk_, chunk_ - decayed_in_chunk_).clone().requires_grad_(true);
  release();
}

void FsdpUnit::gather(const std::string& when) {
  torch::NoGradGuard no_grad;
  const auto chunk = torch::cat({decayed_shard_.detach(), plain_shard_.detach()});
  full_ = torch::empty({chunk_ * group_->size()}, chunk.options());
  group_->all_gather(full_, chunk, "all_gather." + name_ + "." + when);
  int64_t offset = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    const int64_t numel = c10::multiply_integers(shapes_[i]);
    p.set_data(full_.narrow(0, offset, numel).view(shapes_[i]));
    offset += numel;
  }
  gathered_ = true;
}

void FsdpUnit::release() {
  for (auto& p : params_) p.set_data(torch::empty({0}, p.options()));
  full_ = torch::Tensor();
  gathered_ = false;
}

std::vector<torch::Tensor> FsdpUnit::reduce_scatter(const std::vector<torch::Tensor>& grads) {
  torch::NoGradGuard no_grad;
  const auto options = decayed_shard_.options();
  auto padded = torch::zeros({chunk_ * group_->size()}, options);
  int64_t offset = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t numel = c10::multiply_integers(shapes_[i]);
    if (grads[i].defined()) padded.narrow(0, offset, numel).copy_(grads[i].reshape({-1}));
    offset += numel;
  }
  auto mine = torch::empty({chunk_}, options);
  group_->reduce_scatter_avg(mine, padded, "reduce_scatter." + name_);
  return {mine.narrow(0, 0, decayed_in_chunk_), mine.narrow(0, decayed_in_chunk_, chunk_ - decayed_in_chunk_)};
}

void FsdpUnit::keep_own_chunk() {
  torch::NoGradGuard no_grad;
  if (!gathered_) throw std::logic_error("FsdpUnit " + name_ + ": keep_own_chunk while released");
  const auto mine = full_.narrow(0, chunk_ * group_->rank(), chunk_);
  decayed_shard_.copy_(mine.narrow(0, 0, decayed_in_chunk_));
  plain_shard_.copy_(mine.narrow(0, decayed_in_chunk_, chunk_ - decayed_in_chunk_));
}

int64_t FsdpUnit::resident_bytes() const {
  int64_t bytes = 0;
  for (const auto& p : params_) bytes += bytes_of(p);
  return bytes;
}

std::vector<torch::Tensor> FsdpModel::decayed_shards() const {
  std::vector<torch::Tensor> out;
  for (const auto& block : blocks_) out.push_back(block.unit->decayed_shard());
  out.push_back(root_->decayed_shard());
  return out;
}

std::vector<torch::Tensor> FsdpModel::plain_shards() const {
  std::vector<torch::Tensor> out;
  for (const auto& block : blocks_) out.push_back(block.unit->plain_shard());
  out.push_back(root_->plain_shard());
  return out;
}

void FsdpModel::begin_forward() { root_->gather("fwd"); }

void FsdpModel::end_forward() {
  if (!torch::GradMode::is_enabled()) root_->release();
}

torch::Tensor FsdpModel::block_forward(int64_t index, const torch::Tensor& x) {
  auto replay = c10::make_intrusive<BlockReplay>();
  replay->block = blocks_.at(index);
  const auto& unit = *replay->block.unit;
  return FsdpBlockFunction::apply(replay, x, unit.decayed_shard(), unit.plain_shard());
}

void FsdpModel::reduce_scatter_root_gradients() {
  std::vector<torch::Tensor> grads;
  for (auto& p : root_->parameters()) grads.push_back(p.grad());
  const auto mine = root_->reduce_scatter(grads);
  torch::NoGradGuard no_grad;
  const torch::Tensor shards[] = {root_->decayed_shard(), root_->plain_shard()};
  // The shards' gradients are the optimizer's (views of its flat gradient), accumulated in place.
  for (int i = 0; i < 2; ++i) shards[i].grad().add_(mine[i]);
  for (auto p : root_->parameters()) p.mutable_grad() = torch::Tensor();
}

void FsdpModel::end_step() { root_->release(); }

void FsdpModel::gather_all() {
  for (auto& block : blocks_) block.unit->gather("full");
  root_->gather("full");
}

void FsdpModel::keep_own_chunks() {
  for (auto& block : blocks_) block.unit->keep_own_chunk();
  root_->keep_own_chunk();
}

void FsdpModel::release_all() {
  for (auto& block : blocks_) block.unit->release();
  root_->release();
}

int64_t FsdpModel::resident_parameter_bytes() const {
  int64_t bytes = root_->resident_bytes();
  for (const auto& block : blocks_) bytes += block.unit->resident_bytes();
  return bytes;
}

int64_t FsdpModel::shard_bytes() const {
  int64_t bytes = 0;
  for (const auto& shard : decayed_shards()) bytes += bytes_of(shard);
  for (const auto& shard : plain_shards()) bytes += bytes_of(shard);
  return bytes;
}

}  // namespace rcl
