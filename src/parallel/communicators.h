// The communicators of a set of tensor-parallel ranks, one per rank's backend.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/communicator.h"

namespace quiver {

// Rank i's on backends[i]: in-process over shared memory for host backends
// (parallel/local_communicator.h), NCCL for CUDA devices. Empty, with *error set, where the
// backends have no transport.
std::vector<std::unique_ptr<Communicator>> make_communicators(const std::vector<Backend*>& backends,
                                                              std::string* error);

}  // namespace quiver
