#include "parallel/communicators.h"

#include "parallel/local_communicator.h"

#if QUIVER_HAS_CUDA
#include "backend/cuda/cuda_backend_factory.h"
#endif

namespace quiver {

std::vector<std::unique_ptr<Communicator>> make_communicators(const std::vector<Backend*>& backends,
                                                              std::string* error) {
  bool host = true;
  for (const Backend* b : backends) host &= b->device() == Device::kCpu;
  if (host) return LocalCommunicator::make_group(static_cast<int>(backends.size()));
#if QUIVER_HAS_CUDA
  return make_nccl_communicators(backends, error);
#else
  *error = "tensor-parallel ranks on a device this build has no collectives for";
  return {};
#endif
}

}  // namespace quiver
