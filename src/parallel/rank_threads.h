// RankThreads: one thread per tensor-parallel rank past the first, each kept for the
// engine's life, so a rank's work always runs on the same thread (a GPU rank binds its
// device to it once) while rank 0's runs on the caller's. Not core/ThreadPool: a rank's
// work runs to its end even when another rank's throws (the others may be inside a
// collective that needs it), and the first failure is rethrown to the caller.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace quiver {

class RankThreads {
 public:
  explicit RankThreads(int world);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int world() const { return world_; }
  // Runs fn(r) for every rank at once (rank 0 on the caller) and returns when all have.
  // Every rank runs to its end even when another fails (collectives need them all); the
  // first exception, by rank, is then rethrown.
  void run(const std::function<void(int)>& fn);

 private:
  void loop(int rank);

  int world_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* job_ = nullptr;
  unsigned long generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
};

}  // namespace quiver
