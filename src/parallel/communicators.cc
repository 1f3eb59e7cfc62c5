#include "parallel/communicators.h"

#include "parallel/local_communicator.h"

namespace quiver {

std::vector<std::unique_ptr<Communicator>> make_communicators(const std::vector<Backend*>& backends,
                                                              std::string* error) {
  bool host = true;
  for (const Backend* b : backends) host &= b->device() == Device::kCpu;
  if (host) return LocalCommunicator::make_group(static_cast<int>(backends.size()));
  *error = "tensor parallelism across CUDA GPUs needs NCCL collectives, which this build does not have; "
           "--tensor-parallel-size above 1 runs on the cpu and ref backends";
  return {};
}

}  // namespace quiver
