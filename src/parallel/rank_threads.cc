#include "parallel/rank_threads.h"

#include "core/check.h"

namespace quiver {

RankThreads::RankThreads(int world) : world_(world), errors_(static_cast<size_t>(world)) {
  check(world >= 1, "RankThreads: world below 1");
  for (int r = 1; r < world; ++r) threads_.emplace_back([this, r] { loop(r); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (auto& t : threads_) t.join();
}

void RankThreads::run(const std::function<void(int)>& fn) {
  if (world_ == 1) {
    fn(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    pending_ = world_ - 1;
    ++generation_;
    for (auto& e : errors_) e = nullptr;
  }
  start_.notify_all();
  try {
    fn(0);
  } catch (...) {
    errors_[0] = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
  for (auto& e : errors_)
    if (e) std::rethrow_exception(e);
}

void RankThreads::loop(int rank) {
  unsigned long seen = 0;
  for (;;) {
    const std::function<void(int)>* job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    try {
      (*job)(rank);
    } catch (...) {
      errors_[static_cast<size_t>(rank)] = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_.notify_all();
    }
  }
}

}  // namespace quiver
