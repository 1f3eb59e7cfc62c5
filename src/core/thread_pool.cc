#include "core/thread_pool.h"

#include <algorithm>

namespace quiver {

namespace {
// Chunk t of `threads` chunks over [0, n), aligned to grain.
void chunk_bounds(int64_t n, int64_t grain, int threads, int t, int64_t* begin, int64_t* end) {
  int64_t units = (n + grain - 1) / grain;
  int64_t per = units / threads, extra = units % threads;
  int64_t ub = t * per + std::min<int64_t>(t, extra);
  int64_t ue = ub + per + (t < extra ? 1 : 0);
  *begin = std::min(n, ub * grain);
  *end = std::min(n, ue * grain);
}
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  num_threads_ = num_threads;
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (num_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_grain_ = grain;
    pending_.store(num_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  int64_t b, e;
  chunk_bounds(n, grain, num_threads_, 0, &b, &e);
  if (b < e) fn(b, e, 0);
  // Workers finish within microseconds on hot loops: spin briefly before yielding.
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins > 2000) std::this_thread::yield();
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t, int)>* job;
    int64_t n, grain;
    // Decode issues hundreds of short loops per token: spin a little before sleeping,
    // so the next loop does not pay a futex wake-up.
    for (int spins = 0; spins < 20000 && generation_.load(std::memory_order_acquire) == seen; ++spins) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
      if (stop_) return;
      seen = generation_.load(std::memory_order_acquire);
      job = job_;
      n = job_n_;
      grain = job_grain_;
    }
    int64_t b, e;
    chunk_bounds(n, grain, num_threads_, index, &b, &e);
    if (b < e) (*job)(b, e, index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace quiver
