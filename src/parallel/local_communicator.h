// LocalCommunicator: the collectives between ranks that are threads of one process on
// host memory. It checks the slicing of tensor parallelism on the CPU (each rank a host
// backend) against the unsharded model; GPUs use NCCL instead.
#pragma once

#include <barrier>
#include <memory>
#include <vector>

#include "backend/communicator.h"

namespace quiver {

class LocalCommunicator final : public Communicator {
 public:
  // The communicators of `world` ranks, sharing one exchange.
  static std::vector<std::unique_ptr<Communicator>> make_group(int world);

  int rank() const override { return rank_; }
  int world() const override { return static_cast<int>(shared_->slots.size()); }
  void all_reduce_sum(std::initializer_list<Tensor> tensors) override;
  void all_gather(Tensor out, Tensor in) override;

 private:
  // Each rank publishes its tensors' addresses, then every rank reads all of them.
  struct Shared {
    explicit Shared(int world) : slots(static_cast<size_t>(world)), sync(world) {}
    std::vector<std::vector<Tensor>> slots;
    std::barrier<> sync;
  };
  LocalCommunicator(int rank, std::shared_ptr<Shared> shared) : rank_(rank), shared_(std::move(shared)) {}

  int rank_;
  std::shared_ptr<Shared> shared_;
  std::vector<float> sum_;
};

}  // namespace quiver
