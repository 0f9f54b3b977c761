#include "task_pool.h"

#include <atomic>
#include <exception>

#include "native_error.h"

namespace agentd {

struct TaskPool::Job {
  const std::function<void(size_t)>* task;  // owned by the ParallelFor caller
  size_t count;
  std::atomic<size_t> next{0};
  std::mutex mutex;
  std::condition_variable done;
  size_t finished = 0;         // tasks that returned or were skipped, under mutex
  std::exception_ptr failure;  // first failure, under mutex
  std::atomic<bool> failed{false};
};

TaskPool::TaskPool(size_t maxThreads) : maxThreads_(maxThreads) {}

TaskPool::~TaskPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void TaskPool::Work(Job& job) {
  for (;;) {
    size_t index = job.next.fetch_add(1);
    if (index >= job.count) return;
    std::exception_ptr failure;
    if (!job.failed.load()) {
      try {
        (*job.task)(index);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    std::lock_guard<std::mutex> lock(job.mutex);
    if (failure && !job.failure) {
      job.failure = failure;
      job.failed.store(true);
    }
    if (++job.finished == job.count) job.done.notify_all();
  }
}

void TaskPool::HelperLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    ++idle_;
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    --idle_;
    if (stopping_) return;
    std::shared_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    Work(*job);  // a helper arriving late finds no index left and returns
    lock.lock();
  }
}

void TaskPool::ParallelFor(size_t count, size_t parallelism, const std::function<void(size_t)>& task) {
  if (count == 0) return;
  auto job = std::make_shared<Job>();
  job->task = &task;
  job->count = count;
  size_t helpers = std::min(std::min(parallelism, count), maxThreads_ + 1);
  helpers = helpers > 0 ? helpers - 1 : 0;
  if (helpers > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < helpers; ++i) queue_.push_back(job);
    size_t wanted = queue_.size() > idle_ ? queue_.size() - idle_ : 0;
    while (wanted-- > 0 && threads_.size() < maxThreads_) {
      threads_.emplace_back([this] { HelperLoop(); });
    }
  }
  if (helpers > 0) wake_.notify_all();
  Work(*job);
  std::unique_lock<std::mutex> lock(job->mutex);
  job->done.wait(lock, [&job] { return job->finished == job->count; });
  // Helpers still holding the job find no index left; `task` is not touched
  // again once every index has finished.
  if (job->failure) std::rethrow_exception(job->failure);
}

Slices PlanSlices(size_t length, size_t maxSlices, size_t minSliceBytes, size_t alignBytes) {
  if (length == 0) return {0, 0};
  size_t count = std::max<size_t>(1, std::min(maxSlices, length / std::max<size_t>(1, minSliceBytes)));
  size_t slice = (length + count - 1) / count;
  slice = (slice + alignBytes - 1) / alignBytes * alignBytes;
  return {(length + slice - 1) / slice, slice};
}

// The pools are never destroyed: joining helpers during process exit could
// wait on an operation still in flight.
TaskPool& CpuPool() {
  static TaskPool* pool = new TaskPool(std::max<unsigned>(1, std::thread::hardware_concurrency()));
  return *pool;
}

TaskPool& IoPool() {
  static TaskPool* pool = new TaskPool(kMaxQueueDepth);
  return *pool;
}

}  // namespace agentd
