// CudaBackend lifetime (stream, cuBLAS and cuBLASLt handles and workspace), memory and copies, weight
// upload, and make_cuda_backend(). The ops live in the other .cu files of this folder.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>

#include "backend/cuda/cuda_common.h"

namespace quiver {

using cuda::cublas_check;
using cuda::cuda_check;

CudaBackend::CudaBackend(const CudaBackendOptions& options) : options_(options) {
  check_dispatch_table(options_.dispatch);
  cuda_check(cudaSetDevice(options_.device));
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, options_.device));
  num_sms_ = prop.multiProcessorCount;
  device_name_ = prop.name;
  device_memory_bytes_ = static_cast<int64_t>(prop.totalGlobalMem);
  pdl_ = options_.pdl && prop.major >= 9;
  clusters_ = prop.major >= 9;
  init_norm_kernels(static_cast<int64_t>(prop.sharedMemPerBlockOptin));
  // Non-blocking: the legacy default stream must never serialise with (or break capture of)
  // this stream's work.
  cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  cuda_check(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
  cuda_check(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  cuda_check(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  // Both cuBLAS handles run on stream_ with the same settings; only the workspace differs.
  const auto make_handle = [this](cublasHandle_t* h, void* workspace, size_t bytes) {
    cublas_check(cublasCreate(h));
    // cublasSetStream resets the workspace to cuBLAS's own pool, so the workspace comes after.
    cublas_check(cublasSetStream(*h, stream_));
    cublas_check(cublasSetWorkspace(*h, workspace, bytes));
    // No TF32 anywhere: f32 weights must match the reference to 1e-4.
    cublas_check(cublasSetMathMode(*h, CUBLAS_DEFAULT_MATH));
  };
  cuda_check(cudaMalloc(&cublas_workspace_, options_.cublas_workspace_bytes));
  make_handle(&cublas_, cublas_workspace_, options_.cublas_workspace_bytes);
  make_handle(&cublas_small_, nullptr, 0);  // MatmulKernel::kCublasSmall: no workspace
  cublas_check(cublasLtCreate(&cublas_lt_));
  cuda::configure_attention_kernels();
}

CudaBackend::~CudaBackend() {
  // Best effort: a destructor has no one to report to, and the device may already be gone.
  cudaStreamSynchronize(stream_);
  for (cudaGraphExec_t g : graphs_) cudaGraphExecDestroy(g);
  for (void* p : retired_scratch_) cudaFree(p);
  for (void* p : weights_) cudaFree(p);
  cudaFree(matmul_scratch_.ptr);
  cudaFree(attention_scratch_.ptr);
  cudaFree(attention_counts_.ptr);
  cudaFree(lora_scratch_.ptr);
  cudaFree(vocab_lora_scratch_.ptr);
  cudaFree(fp8_scratch_.ptr);
  cublasLtDestroy(cublas_lt_);
  cublasDestroy(cublas_);
  cublasDestroy(cublas_small_);
  cudaFree(cublas_workspace_);
  cudaEventDestroy(fork_);
  cudaEventDestroy(join_);
  cudaStreamDestroy(side_stream_);
  cudaStreamDestroy(stream_);
}

void* CudaBackend::alloc(size_t bytes) {
  void* p = nullptr;
  // cudaMalloc returns 256-byte aligned memory (the interface promises 64).
  cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 256));
  if (e != cudaSuccess) {
    check(false, "cudaMalloc of " + std::to_string(bytes) + " bytes failed: " + cudaGetErrorString(e));
  }
  return p;
}

int64_t CudaBackend::device_memory_free() const {
  size_t free = 0, total = 0;
  cuda_check(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(free);
}

double CudaBackend::measure_read_gbs() {
  // A device-to-device copy, counted as bytes read plus bytes written (the H200 moves 4.26
  // TB/s so; DESIGN.md section 5), best of 10. 256 MiB each way is 5x an H100's or H200's
  // L2, and fits beside a KV cache planned at --gpu-memory-utilization 0.9.
  constexpr size_t kBytes = size_t{256} << 20;
  void* src = nullptr;
  void* dst = nullptr;
  if (cudaMalloc(&src, kBytes) != cudaSuccess) return 0;
  if (cudaMalloc(&dst, kBytes) != cudaSuccess) {
    cudaFree(src);
    return 0;
  }
  cudaEvent_t start, stop;
  cuda_check(cudaEventCreate(&start));
  cuda_check(cudaEventCreate(&stop));
  cuda_check(cudaMemsetAsync(src, 0, kBytes, stream_));
  double best = 0;
  for (int pass = 0; pass < 11; ++pass) {  // the first warms up
    cuda_check(cudaEventRecord(start, stream_));
    cuda_check(cudaMemcpyAsync(dst, src, kBytes, cudaMemcpyDeviceToDevice, stream_));
    cuda_check(cudaEventRecord(stop, stream_));
    cuda_check(cudaEventSynchronize(stop));
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, start, stop));
    if (pass > 0 && ms > 0) best = std::max(best, 2.0 * static_cast<double>(kBytes) / (ms * 1e-3) / 1e9);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(src);
  cudaFree(dst);
  return best;
}

void CudaBackend::free(void* ptr) {
  // cudaFree waits for the device, so work still reading ptr finishes first.
  if (ptr) cuda_check(cudaFree(ptr));
}

void CudaBackend::copy_from_host(void* dst, const void* src, size_t bytes) {
  // From pageable memory (every caller's std::vector / mmap) CUDA stages the source before
  // returning, so the caller may reuse `src` at once; the copy is ordered on the stream.
  if (bytes == 0) return;
  cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  cuda_check(cudaStreamSynchronize(stream_));  // the host reads dst next
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::fill_zero(void* dst, size_t bytes) {
  if (bytes == 0) return;
  cuda_check(cudaMemsetAsync(dst, 0, bytes, stream_));
}

void CudaBackend::copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows) {
  if (width == 0 || rows == 0) return;
  cuda_check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::synchronize() { cuda_check(cudaStreamSynchronize(stream_)); }

void CudaBackend::bind_thread() { cuda_check(cudaSetDevice(options_.device)); }

Tensor CudaBackend::import_weight(const Tensor& host) {
  check(host.device == Device::kCpu, "import_weight: expects a host tensor");
  Tensor t = host;
  t.device = Device::kCuda;
  t.data = alloc(host.bytes());
  weights_.push_back(t.data);
  if (host.bytes() > 0) {
    cuda_check(cudaMemcpyAsync(t.data, host.data, host.bytes(), cudaMemcpyHostToDevice, stream_));
    // The host side may be an mmap that the caller unmaps right after.
    cuda_check(cudaStreamSynchronize(stream_));
  }
  return t;
}

void CudaBackend::release_weight(const Tensor& imported) {
  const auto it = std::find(weights_.begin(), weights_.end(), imported.data);
  check(it != weights_.end(), "release_weight: not a weight this backend imported");
  weights_.erase(it);
  free(imported.data);
}

bool CudaBackend::capturing() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cuda_check(cudaStreamIsCapturing(stream_, &status));
  return status != cudaStreamCaptureStatusNone;
}

void* CudaBackend::scratch(Scratch& s, size_t bytes, const char* what) {
  if (bytes <= s.bytes) return s.ptr;
  check(!capturing(), std::string(what) +
                          " scratch must grow, but the stream is capturing a graph: run the largest shape "
                          "eagerly before capture");
  if (s.ptr && !graphs_.empty()) {
    retired_scratch_.push_back(s.ptr);  // a captured graph may still point into it
  } else if (s.ptr) {
    cuda_check(cudaFree(s.ptr));  // waits for kernels still using it
  }
  const size_t rounded = (bytes + (size_t{1} << 21) - 1) & ~((size_t{1} << 21) - 1);
  s.ptr = nullptr;
  s.bytes = 0;
  cuda_check(cudaMalloc(&s.ptr, rounded));
  cuda_check(cudaMemsetAsync(s.ptr, 0, rounded, stream_));
  // project() grows lora_scratch_ (t, or a prefill shrink's partials) after its fork, which
  // does not order this memset before the side stream's shrink that writes it: finish it
  // first (growth is rare, never captured).
  cuda_check(cudaStreamSynchronize(stream_));
  s.bytes = rounded;
  return s.ptr;
}

std::unique_ptr<Backend> make_cuda_backend(int device, std::string* error) {
  CudaBackendOptions options;
  options.device = device;
  return make_cuda_backend(options, error);
}

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options, std::string* error) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    *error = std::string("no CUDA device available (") + cudaGetErrorString(e) + ")";
    cudaGetLastError();  // not sticky, but leave no error behind for later checks
    return nullptr;
  }
  if (options.device < 0 || options.device >= count) {
    *error = "CUDA device " + std::to_string(options.device) + " requested, " + std::to_string(count) + " present";
    return nullptr;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, options.device) != cudaSuccess || prop.major < 8) {
    *error = "CUDA device " + std::to_string(options.device) + " (" + prop.name +
             ") is older than compute capability 8.0, which quiver needs";
    return nullptr;
  }
  return std::make_unique<CudaBackend>(options);
}

}  // namespace quiver
