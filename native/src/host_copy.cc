// Host-to-host bulk copies between regions (shared memory <-> pool extent),
// split across the CPU pool for large sizes, plus the single-threaded memcpy
// baseline the copy benchmark compares against.
#include <cstring>

#include "addon_data.h"
#include "host_copy.h"
#include "host_region.h"
#include "promise_worker.h"
#include "task_pool.h"

namespace agentd {

namespace {

// Below this a copy runs on one thread: waking helpers costs more than it buys.
constexpr size_t kMinSliceBytes = size_t(4) << 20;
constexpr size_t kSliceAlignBytes = 4096;

class HostCopyWorker final : public PromiseWorker {
 public:
  // threads == 0: as many as the CPU pool has. threads == 1: one plain memcpy
  // on this worker thread (the benchmark baseline).
  HostCopyWorker(Napi::Env env, std::shared_ptr<HostRegion> dst, size_t dstOffset,
                 std::shared_ptr<HostRegion> src, size_t srcOffset, size_t length, size_t threads)
      : PromiseWorker(env, "agentd:copyHost"),
        dstRegion_(std::move(dst)),
        srcRegion_(std::move(src)),
        dst_(dstRegion_->Span(dstOffset, length)),
        src_(srcRegion_->Span(srcOffset, length)),
        length_(length),
        threads_(threads) {
    if (dst_ < src_ + length && src_ < dst_ + length && length > 0) {
      throw NativeError("ERR_ARG_INVALID", "source and destination ranges overlap");
    }
  }

 protected:
  void Run() override {
    if (threads_ == 1) {
      std::memcpy(dst_, src_, length_);
      return;
    }
    TaskPool& pool = CpuPool();
    size_t parallelism = threads_ == 0 ? pool.maxThreads() : threads_;
    Slices slices = PlanSlices(length_, parallelism, kMinSliceBytes, kSliceAlignBytes);
    pool.ParallelFor(slices.count, parallelism, [this, &slices](size_t i) {
      size_t offset = i * slices.sliceBytes;
      std::memcpy(dst_ + offset, src_ + offset, std::min(slices.sliceBytes, length_ - offset));
    });
  }

 private:
  std::shared_ptr<HostRegion> dstRegion_;
  std::shared_ptr<HostRegion> srcRegion_;
  uint8_t* dst_;
  const uint8_t* src_;
  size_t length_;
  size_t threads_;
};

// copyHost(dst, dstOffset, src, srcOffset, length, threads): Promise<void>
Napi::Value CopyHostJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return GuardedCall(env, [&]() -> Napi::Value {
    auto* worker = new HostCopyWorker(env, NativeRegion::From(info[0]), ToSize(info[1], "dstOffset"),
                                      NativeRegion::From(info[2]), ToSize(info[3], "srcOffset"),
                                      ToSize(info[4], "length"), ToSize(info[5], "threads"));
    return worker->Start();
  });
}

// Gathers `runs` runs of `runBytes` each, `srcStride` bytes apart in src,
// into consecutive bytes of dst (a strided slice of a row-major tensor, e.g. a
// row-parallel shard of a weight matrix): one call instead of one per row.
class HostGatherWorker final : public PromiseWorker {
 public:
  HostGatherWorker(Napi::Env env, std::shared_ptr<HostRegion> dst, size_t dstOffset,
                   std::shared_ptr<HostRegion> src, size_t srcOffset, size_t runBytes, size_t runs,
                   size_t srcStride, size_t threads)
      : PromiseWorker(env, "agentd:gatherHost"),
        dstRegion_(std::move(dst)),
        srcRegion_(std::move(src)),
        runBytes_(runBytes),
        runs_(runs),
        srcStride_(srcStride),
        threads_(threads) {
    if (runs == 0 || runBytes == 0)
      throw NativeError("ERR_ARG_INVALID", "gather needs at least one non-empty run");
    if (srcStride < runBytes) throw NativeError("ERR_ARG_INVALID", "srcStride is smaller than runBytes");
    size_t total = runBytes * runs;
    size_t span = srcStride * (runs - 1) + runBytes;
    if (total / runs != runBytes || (runs > 1 && span / (runs - 1) < srcStride))
      throw NativeError("ERR_OUT_OF_RANGE", "gather size overflows");
    dst_ = dstRegion_->Span(dstOffset, total);
    src_ = srcRegion_->Span(srcOffset, span);
    if (dst_ < src_ + span && src_ < dst_ + total)
      throw NativeError("ERR_ARG_INVALID", "source and destination ranges overlap");
  }

 protected:
  void Run() override {
    auto copyRuns = [this](size_t first, size_t last) {
      for (size_t r = first; r < last; r++)
        std::memcpy(dst_ + r * runBytes_, src_ + r * srcStride_, runBytes_);
    };
    size_t total = runBytes_ * runs_;
    if (threads_ == 1 || total < kMinSliceBytes) {
      copyRuns(0, runs_);
      return;
    }
    TaskPool& pool = CpuPool();
    size_t parallelism = threads_ == 0 ? pool.maxThreads() : threads_;
    size_t perTask = (runs_ + parallelism - 1) / parallelism;
    size_t tasks = (runs_ + perTask - 1) / perTask;
    pool.ParallelFor(tasks, parallelism, [&copyRuns, perTask, this](size_t i) {
      copyRuns(i * perTask, std::min(runs_, (i + 1) * perTask));
    });
  }

 private:
  std::shared_ptr<HostRegion> dstRegion_;
  std::shared_ptr<HostRegion> srcRegion_;
  uint8_t* dst_ = nullptr;
  const uint8_t* src_ = nullptr;
  size_t runBytes_;
  size_t runs_;
  size_t srcStride_;
  size_t threads_;
};

// gatherHost(dst, dstOffset, src, srcOffset, runBytes, runs, srcStride, threads): Promise<void>
Napi::Value GatherHostJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return GuardedCall(env, [&]() -> Napi::Value {
    auto* worker = new HostGatherWorker(env, NativeRegion::From(info[0]), ToSize(info[1], "dstOffset"),
                                        NativeRegion::From(info[2]), ToSize(info[3], "srcOffset"),
                                        ToSize(info[4], "runBytes"), ToSize(info[5], "runs"),
                                        ToSize(info[6], "srcStride"), ToSize(info[7], "threads"));
    return worker->Start();
  });
}

}  // namespace

void RegisterHostCopy(Napi::Env env, Napi::Object exports) {
  exports.Set("copyHost", Napi::Function::New(env, CopyHostJs, "copyHost"));
  exports.Set("gatherHost", Napi::Function::New(env, GatherHostJs, "gatherHost"));
}

}  // namespace agentd
