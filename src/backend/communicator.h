// Communicator: the collectives tensor parallelism needs, between the ranks of one model.
// Each rank holds its own Communicator and calls every collective in the same order as
// the others; a call is ordered with the rank's backend ops the way its ops are among
// themselves (the host backends: it returns when done; a GPU's: it is queued on the
// backend's stream, and a graph captured on that stream records it).
#pragma once

#include <initializer_list>

#include "core/tensor.h"

namespace quiver {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Each f32 tensor becomes, in place, the sum of that tensor over the ranks, added in rank
  // order, so every rank holds the same bits. Several tensors go as one group.
  virtual void all_reduce_sum(std::initializer_list<Tensor> tensors) = 0;
  // out ([world, in.numel()] f32) = every rank's `in`, in rank order.
  virtual void all_gather(Tensor out, Tensor in) = 0;
};

}  // namespace quiver
