// ZeRO (stages 1 and 2, DeepSpeed's runtime/zero/stage_1_and_2.py) over the Communicator: each
// rank owns one equal shard of the optimizer's flat buffer. Per step it issues what DeepSpeed
// issues: a reduce-scatter (AVG) of the flat gradient per gradient sync, a 1-element all-reduce
// of the squared gradient norm, and an all-gather of the updated parameters. Every collective
// goes through the Communicator (RCCL's native kinds; Gloo's emulation) and is recorded.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/transport/communicator.hpp"
#include "rocm_conformance_llm/transport/data_parallel.hpp"
#include "rocm_conformance_llm/transport/grad_sync.hpp"
#include "rocm_conformance_llm/workload/optimizer.hpp"

namespace rcl {

// report.json's `data_parallel` section: what `requested` did in this run of `world_size` ranks
// (`model` as trained, its optimizer updating `optimizer_shard`).
nlohmann::json data_parallel_section(DataParallel requested, const ShardOf& optimizer_shard, int world_size,
                                     GPT& model);

class ZeroShards final : public DataParallelLayout {
 public:
  explicit ZeroShards(Communicator& comm) : comm_(comm) {}

  ShardOf optimizer_shard() const override { return {comm_.rank(), comm_.world_size()}; }
  // A new optimizer step: its first gradient sync starts the average afresh.
  void begin_step() override { syncs_this_step_ = 0; }
  // Reduce-scatter (AVG) of the whole padded gradient into this rank's shard; the other shards'
  // gradients are then zeroed (ZeRO-2 frees them): nothing reads them, and a later sync in the
  // same step must not count them twice. A later sync in the same step (grad_sync_interval <
  // grad_accum_steps) averages only what was accumulated since, and adds the earlier average.
  void sync_gradients(FlatAdamW& optimizer, std::vector<CollectiveSample>& out) override;
  void sum_over_ranks(torch::Tensor& value, std::vector<CollectiveSample>& out) override;
  // All-gather of every rank's updated shard into the whole padded parameter buffer.
  void after_update(FlatAdamW& optimizer, std::vector<CollectiveSample>& out) override;

 private:
  Communicator& comm_;
  int syncs_this_step_ = 0;
  torch::Tensor synced_;  // this shard's average as the last sync of this step left it
};

}  // namespace rcl
