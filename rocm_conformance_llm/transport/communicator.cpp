// The Communicator's collectives: each one routed for its backend, put on the wire, timed and,
// when it fails, diagnosed. Joining, heartbeats and the store's exchanges live beside it.
#include "rocm_conformance_llm/transport/communicator.hpp"

#include <optional>

#include <torch/cuda.h>

#include "rocm_conformance_llm/base/deferred_scalars.hpp"
#include "rocm_conformance_llm/base/host_reads.hpp"
#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/transport/communicator_impl.hpp"

namespace rcl {
namespace {

using Clock = SteadyClock;

int64_t byte_size(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return c10d::ReduceOp::SUM;
    case ReduceOp::avg: return c10d::ReduceOp::AVG;
    case ReduceOp::min: return c10d::ReduceOp::MIN;
    case ReduceOp::max: return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}

// `t` as the route puts it on the wire: a view of its bits, a converted copy, or `t` itself.
// A view writes through to `t`; a copy must be copied back (back_from_wire).
torch::Tensor on_wire(const torch::Tensor& t, const CollectiveRoute& route) {
  if (!route.carried_as) return t;
  if (route.reinterpreted) {
    TORCH_CHECK(t.is_contiguous(), "a tensor carried as its bits must be contiguous");
    return t.view(*route.carried_as);
  }
  return t.to(*route.carried_as);
}

// After the collective: AVG emulated as SUM divides here (integers truncate, as RCCL's do), and
// a converted copy goes back into `t`.
void back_from_wire(torch::Tensor& wire, torch::Tensor& t, const CollectiveRoute& route, int world_size) {
  if (route.sum_then_divide) {
    if (c10::isIntegralType(wire.scalar_type(), /*includeBool=*/false)) wire.div_(world_size, "trunc");
    else wire.div_(world_size);
  }
  if (!wire.is_same(t) && !route.reinterpreted) t.copy_(wire.view_as(t));
}

}  // namespace

CollectiveError::CollectiveError(Finding finding) : std::runtime_error(finding.message), finding_(std::move(finding)) {}

// `on_device`: the tensors live on the training device (host tensors need no wait for it).
// Kernels queued before the collective (backward, flattening) are not communication time.
// ProcessGroupNCCL's wait() (RCCL's, NCCL's) only orders the current stream after the
// collective, so where events can time, a DeviceInterval around it times it on the stream,
// read when the step is published: no host wait per gradient bucket, which would drain the
// queue the GPU works from. Otherwise (Gloo, whose wait blocks anyway; libtorch 1.13) the device
// is drained first and the host clock times it. `tensor` (the caller's, before any wire
// conversion) gives the sample its dtype and where it lives.
template <typename Start>
CollectiveSample Communicator::Impl::run(const std::string& op, CollectiveKind kind, std::optional<ReduceOp> reduce,
                                         const torch::Tensor& tensor, int64_t bytes, Start&& start) {
  const bool on_device = !tensor.is_cpu();
  const int64_t seq = ++sequence;
  std::optional<c10::DeviceGuard> guard;
  std::shared_ptr<DeviceInterval> on_stream;
  if (on_device && !device.is_cpu()) {
    guard.emplace(device);
    if (backend != "gloo" && DeviceInterval::available()) {
      on_stream = std::make_shared<DeviceInterval>(device);
    } else {
      note_device_wait();
      torch::cuda::synchronize(device.has_index() ? device.index() : -1);
    }
  }
  const auto started = Clock::now();
  try {
    publish_heartbeat(op);
    auto work = start();
    work->wait(timeout);
  } catch (const std::exception& e) {
    throw CollectiveError(diagnose(seq, op, kind, seconds_since(started), e.what()));
  }
  const double seconds = seconds_since(started);
  CollectiveSample sample{.op = op,
                          .bytes = bytes,
                          .seconds = seconds,
                          .bus_bandwidth_gbps = bus_bandwidth_gbps(kind, bytes, seconds, world_size),
                          .sequence = seq,
                          .kind = to_string(kind),
                          .reduce_op = reduce ? to_string(*reduce) : "",
                          .dtype = c10::toString(tensor.scalar_type()),
                          .group = group_label};
  if (on_stream) {
    on_stream->stop();
    sample.settle = settle_on_device_time([on_stream] { return on_stream->seconds(); }, seconds, kind, world_size);
  }
  return sample;
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->rank; }
int Communicator::world_size() const { return impl_->world_size; }
const torch::Device& Communicator::device() const { return impl_->device; }
const std::string& Communicator::backend() const { return impl_->backend; }
int64_t Communicator::sequence() const { return impl_->sequence; }
int64_t Communicator::step() const { return impl_->step; }
void Communicator::set_step(int64_t step) { impl_->step = step; }
std::chrono::milliseconds Communicator::timeout() const { return impl_->timeout; }

CollectiveSample Communicator::all_reduce_sum(torch::Tensor& tensor, const std::string& op) {
  return all_reduce(tensor, ReduceOp::sum, op);
}

CollectiveSample Communicator::all_reduce(torch::Tensor& tensor, ReduceOp reduce, const std::string& op) {
  const CollectiveRoute route = impl_->route(CollectiveKind::all_reduce, reduce, tensor);
  std::vector<at::Tensor> tensors{on_wire(tensor, route)};
  CollectiveSample sample = impl_->run(op, CollectiveKind::all_reduce, reduce, tensor, byte_size(tensor), [&] {
    c10d::AllreduceOptions options;
    options.reduceOp = to_c10d(route.sum_then_divide ? ReduceOp::sum : reduce);
    return impl_->group_for(tensor)->allreduce(tensors, options);
  });
  back_from_wire(tensors[0], tensor, route, impl_->world_size);
  return sample;
}

torch::Tensor Communicator::all_gather(const torch::Tensor& tensor, const std::string& op, CollectiveSample* sample) {
  const torch::Tensor in = tensor.contiguous();
  std::vector<int64_t> shape{impl_->world_size};
  shape.insert(shape.end(), in.sizes().begin(), in.sizes().end());
  torch::Tensor out = torch::empty(shape, in.options());
  CollectiveSample done = all_gather_into(out, in, op);
  if (sample) *sample = done;
  return out;
}

CollectiveSample Communicator::all_gather_into(torch::Tensor& out, const torch::Tensor& in, const std::string& op) {
  const int64_t numel = in.numel();
  TORCH_CHECK(out.is_contiguous() && out.numel() == numel * impl_->world_size && out.dtype() == in.dtype(),
              "all_gather_into: the output must be contiguous, of the input's dtype, world_size x its size");
  const CollectiveRoute route = impl_->route(CollectiveKind::all_gather, ReduceOp::sum, in);
  std::vector<at::Tensor> inputs{on_wire(in.contiguous(), route).reshape(-1)};
  torch::Tensor received = on_wire(out, route).view(-1);  // data movement only: a view, written through
  return impl_->run(op, CollectiveKind::all_gather, std::nullopt, in, byte_size(out), [&] {
    if (route.native) return impl_->group_for(in)->_allgather_base(received, inputs[0]);
    // Gloo 1.13: the list form, whose outputs are views of `out` (Gloo copies each rank's part in).
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < impl_->world_size; ++r) outputs[0].push_back(received.narrow(0, r * numel, numel));
    return impl_->group_for(in)->allgather(outputs, inputs);
  });
}

CollectiveSample Communicator::reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp reduce,
                                              const std::string& op) {
  const int64_t numel = out.numel();
  TORCH_CHECK(out.is_contiguous() && in.numel() == numel * impl_->world_size && out.dtype() == in.dtype(),
              "reduce_scatter: the output must be contiguous, of the input's dtype, 1/world_size of its size");
  const CollectiveRoute route = impl_->route(CollectiveKind::reduce_scatter, reduce, in);
  if (route.native) {
    torch::Tensor input = in.contiguous().view(-1);
    torch::Tensor output = out.view(-1);
    return impl_->run(op, CollectiveKind::reduce_scatter, reduce, in, byte_size(in), [&] {
      c10d::ReduceScatterOptions options;
      options.reduceOp = to_c10d(reduce);
      return impl_->group_for(in)->_reduce_scatter_base(output, input, options);
    });
  }
  // Emulated: the whole input all-reduced (a copy: the caller's input stays as it was), then
  // this rank's chunk. Moves world_size x the data of a real reduce-scatter; the sample's bus
  // bandwidth is still counted on reduce-scatter's bytes, so Gloo's figure reads low.
  std::vector<at::Tensor> whole{route.carried_as ? in.to(*route.carried_as).reshape(-1)
                                                 : in.reshape(-1).clone(at::MemoryFormat::Contiguous)};
  CollectiveSample sample = impl_->run(op, CollectiveKind::reduce_scatter, reduce, in, byte_size(in), [&] {
    c10d::AllreduceOptions options;
    options.reduceOp = to_c10d(route.sum_then_divide ? ReduceOp::sum : reduce);
    return impl_->group_for(in)->allreduce(whole, options);
  });
  torch::Tensor mine = whole[0].narrow(0, impl_->rank * numel, numel);
  CollectiveRoute copied_back = route;
  copied_back.reinterpreted = false;  // `mine` is always a separate buffer: copy it into `out`
  back_from_wire(mine, out, copied_back, impl_->world_size);
  return sample;
}

CollectiveSample Communicator::all_to_all(torch::Tensor& out, const torch::Tensor& in,
                                          const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits,
                                          const std::string& op) {
  TORCH_CHECK(out.is_contiguous(), "all_to_all: the output must be contiguous");
  const CollectiveRoute route = impl_->route(CollectiveKind::all_to_all, ReduceOp::sum, in);
  torch::Tensor input = on_wire(in.contiguous(), route);
  torch::Tensor output = on_wire(out, route);  // data movement only: a view, written through
  std::vector<int64_t> send = in_splits, receive = out_splits;
  return impl_->run(op, CollectiveKind::all_to_all, std::nullopt, in, byte_size(in), [&] {
    return impl_->group_for(in)->alltoall_base(output, input, receive, send, c10d::AllToAllOptions());
  });
}

torch::Tensor Communicator::all_to_all_uneven(const torch::Tensor& in, const std::vector<int64_t>& in_splits,
                                              const std::string& op, std::vector<CollectiveSample>* samples) {
  const int world = impl_->world_size;
  TORCH_CHECK(static_cast<int>(in_splits.size()) == world, "all_to_all_uneven: one split per rank");
  // The counts first, as MoE dispatch does: each rank learns how many rows every peer sends it.
  torch::Tensor counts = torch::tensor(in_splits, torch::kLong).to(in.device());
  torch::Tensor received_counts = torch::empty_like(counts);
  const std::vector<int64_t> ones(world, 1);
  CollectiveSample counted = all_to_all(received_counts, counts, ones, ones, op + "_counts");
  const torch::Tensor host_counts = received_counts.cpu();
  const std::vector<int64_t> out_splits(host_counts.data_ptr<int64_t>(), host_counts.data_ptr<int64_t>() + world);
  std::vector<int64_t> shape(in.sizes().begin(), in.sizes().end());
  shape[0] = 0;
  for (const int64_t rows : out_splits) shape[0] += rows;
  torch::Tensor out = torch::empty(shape, in.options());
  CollectiveSample moved = all_to_all(out, in, out_splits, in_splits, op);
  if (samples) {
    samples->push_back(std::move(counted));
    samples->push_back(std::move(moved));
  }
  return out;
}

CollectiveSample Communicator::broadcast(torch::Tensor& tensor, int root, const std::string& op) {
  const CollectiveRoute route = impl_->route(CollectiveKind::broadcast, ReduceOp::sum, tensor);
  std::vector<at::Tensor> tensors{on_wire(tensor, route)};  // data movement only: a view, written through
  return impl_->run(op, CollectiveKind::broadcast, std::nullopt, tensor, byte_size(tensor), [&] {
    c10d::BroadcastOptions options;
    options.rootRank = root;
    return impl_->group_for(tensor)->broadcast(tensors, options);
  });
}

}  // namespace rcl
