#include "rocm_conformance_llm/transport/data_parallel.hpp"

#include "rocm_conformance_llm/transport/fsdp_sync.hpp"
#include "rocm_conformance_llm/transport/sharded_sync.hpp"

namespace rcl {
namespace {

int64_t tensor_bytes(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// Consecutive tensors of one dtype and device, up to about `bucket_bytes` per bucket; a tensor
// bigger than a bucket travels alone.
std::vector<std::vector<torch::Tensor>> plan_buckets(const std::vector<torch::Tensor>& tensors, int64_t bucket_bytes) {
  std::vector<std::vector<torch::Tensor>> buckets;
  int64_t filled = 0;
  for (const auto& t : tensors) {
    const bool fits = !buckets.empty() && buckets.back().front().dtype() == t.dtype() &&
                      buckets.back().front().device() == t.device() && filled + tensor_bytes(t) <= bucket_bytes;
    if (!fits) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(t);
    filled += tensor_bytes(t);
  }
  return buckets;
}

// True when the bucket's tensors are contiguous and lie back to back in one storage, as the
// gradients of FlatAdamW do: the bucket is then a view of that storage (DDP's
// gradient-as-bucket-view) and needs neither the flattening copy nor the copy back.
bool back_to_back(const std::vector<torch::Tensor>& bucket) {
  for (size_t i = 0; i < bucket.size(); ++i) {
    if (!bucket[i].is_contiguous()) return false;
    if (i == 0) continue;
    const auto& before = bucket[i - 1];
    if (!bucket[i].storage().is_alias_of(before.storage()) ||
        bucket[i].storage_offset() != before.storage_offset() + before.numel())
      return false;
  }
  return true;
}

// Runs `reduce` on each bucket as one flat buffer, and leaves the result in the bucket's tensors.
template <typename Reduce>
void for_each_flat_bucket(const std::vector<torch::Tensor>& tensors, int64_t bucket_bytes, Reduce&& reduce) {
  for (const auto& bucket : plan_buckets(tensors, bucket_bytes)) {
    if (back_to_back(bucket)) {
      int64_t numel = 0;
      for (const auto& t : bucket) numel += t.numel();
      const auto& first = bucket.front();
      auto view = first.as_strided({numel}, {1}, first.storage_offset());
      reduce(view);
      continue;
    }
    std::vector<torch::Tensor> pieces;
    for (const auto& t : bucket) pieces.push_back(t.reshape(-1));
    auto flat = torch::cat(pieces);
    reduce(flat);
    int64_t offset = 0;
    for (const auto& t : bucket) {
      t.copy_(flat.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  }
}

}  // namespace

void DdpBuckets::sync_gradients(FlatAdamW& optimizer, std::vector<CollectiveSample>& out) {
  average_gradients(optimizer.shared_parameters(), out);
}

void DdpBuckets::average_gradients(const std::vector<torch::Tensor>& params, std::vector<CollectiveSample>& out) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    if (!p.requires_grad()) continue;
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  if (data_.world_size() == 1) return;  // a split model over the whole world: one replica
  const double world = data_.world_size();
  for_each_flat_bucket(grads, bucket_bytes_, [&](torch::Tensor& flat) {
    out.push_back(data_.all_reduce_sum(flat, "allreduce"));
    flat.div_(world);
  });
}

void broadcast_in_buckets(const std::vector<torch::Tensor>& tensors, Communicator& group, int64_t bucket_bytes) {
  for_each_flat_bucket(tensors, bucket_bytes,
                       [&](torch::Tensor& flat) { group.broadcast(flat, 0, "broadcast_params"); });
}

std::unique_ptr<DataParallelLayout> make_data_parallel_layout(DataParallel kind, Communicator& data,
                                                              int64_t bucket_bytes) {
  switch (kind) {
    case DataParallel::zero: return std::make_unique<ZeroShards>(data);
    case DataParallel::fsdp: return std::make_unique<FsdpShards>(data);
    case DataParallel::ddp: break;
  }
  return std::make_unique<DdpBuckets>(data, bucket_bytes);
}

}  // namespace rcl
