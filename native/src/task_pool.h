// Persistent native threads for bulk work that one libuv worker thread would
// serialize: splitting a large copy or checksum across cores, and keeping
// `queueDepth` direct-I/O requests in flight. The calling thread (a libuv
// worker) always takes part, so a busy pool slows an operation down but never
// deadlocks it.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace agentd {

class TaskPool {
 public:
  // `maxThreads`: helper threads started lazily, never more than this.
  explicit TaskPool(size_t maxThreads);
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Calls task(i) for every i in [0, count), on at most `parallelism` threads
  // (the caller included), and returns when all calls have returned. Tasks
  // must not throw anything but NativeError; the first one thrown is
  // rethrown here after the remaining tasks were skipped.
  void ParallelFor(size_t count, size_t parallelism, const std::function<void(size_t)>& task);

  size_t maxThreads() const { return maxThreads_; }

 private:
  struct Job;
  void HelperLoop();
  static void Work(Job& job);

  const size_t maxThreads_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;  // one entry per requested helper
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stopping_ = false;
};

// How a byte range is cut into slices for ParallelFor: `count` slices of
// `sliceBytes` (a multiple of `alignBytes`), the last one possibly shorter.
struct Slices {
  size_t count;
  size_t sliceBytes;
};
Slices PlanSlices(size_t length, size_t maxSlices, size_t minSliceBytes, size_t alignBytes);

// Process-wide pools. Copies and checksums are CPU-bound: one thread per core.
// Direct I/O blocks in the kernel: up to kMaxQueueDepth threads.
constexpr size_t kMaxQueueDepth = 64;
TaskPool& CpuPool();
TaskPool& IoPool();

}  // namespace agentd
