// NCCL collectives between CUDA backends of one process, one communicator per GPU
// (ncclCommInitAll), each collective queued on its rank's backend stream, where a decode
// graph's capture records it like a kernel.
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_factory.h"

#if QUIVER_HAS_NCCL
#include <nccl.h>
#endif

namespace quiver {

#if QUIVER_HAS_NCCL

namespace {

void nccl_check(ncclResult_t r, const char* what) {
  check(r == ncclSuccess, std::string(what) + ": " + ncclGetErrorString(r));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int world, cudaStream_t stream)
      : comm_(comm), rank_(rank), world_(world), stream_(stream) {}
  ~NcclCommunicator() override { ncclCommDestroy(comm_); }
  int rank() const override { return rank_; }
  int world() const override { return world_; }

  void all_reduce_sum(std::initializer_list<Tensor> tensors) override {
    // One group: NCCL fuses the tensors' reductions into one launch.
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    for (const Tensor& t : tensors) {
      check(t.dtype == DType::kF32 && t.device == Device::kCuda, "all_reduce_sum: f32 device tensors");
      nccl_check(ncclAllReduce(t.data, t.data, static_cast<size_t>(t.numel()), ncclFloat, ncclSum, comm_, stream_),
                 "ncclAllReduce");
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  }

  void all_gather(Tensor out, Tensor in) override {
    check(out.numel() == in.numel() * world_ && out.dtype == in.dtype && in.dtype == DType::kF32,
          "all_gather: out must be [world, in] f32");
    nccl_check(ncclAllGather(in.data, out.data, static_cast<size_t>(in.numel()), ncclFloat, comm_, stream_),
               "ncclAllGather");
  }

 private:
  ncclComm_t comm_;
  int rank_, world_;
  cudaStream_t stream_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(const std::vector<Backend*>& backends,
                                                                   std::string* error) {
  std::vector<int> devices;
  for (Backend* b : backends) {
    auto* cuda = dynamic_cast<CudaBackend*>(b);
    if (cuda == nullptr) {
      *error = "NCCL communicators need CUDA backends";
      return {};
    }
    devices.push_back(cuda->options().device);
  }
  // NVLink SHARP (multicast) is off unless the environment asks for it: a decode step's
  // all-reduces are a few KiB, which NCCL's ring and tree algorithms serve.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  std::vector<ncclComm_t> comms(backends.size());
  const ncclResult_t r = ncclCommInitAll(comms.data(), static_cast<int>(comms.size()), devices.data());
  if (r != ncclSuccess) {
    *error = std::string("ncclCommInitAll over ") + std::to_string(devices.size()) + " GPUs: " + ncclGetErrorString(r);
    return {};
  }
  std::vector<std::unique_ptr<Communicator>> out;
  for (size_t i = 0; i < comms.size(); ++i)
    out.push_back(std::make_unique<NcclCommunicator>(comms[i], static_cast<int>(i), static_cast<int>(comms.size()),
                                                     static_cast<CudaBackend*>(backends[i])->stream()));
  return out;
}

#else

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(const std::vector<Backend*>&, std::string* error) {
  *error = "this build has no NCCL (the CUDA toolkit's libnccl was not found), so CUDA runs one GPU; "
           "--tensor-parallel-size above 1 needs it";
  return {};
}

#endif

}  // namespace quiver
