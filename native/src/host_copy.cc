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

}  // namespace

void RegisterHostCopy(Napi::Env env, Napi::Object exports) {
  exports.Set("copyHost", Napi::Function::New(env, CopyHostJs, "copyHost"));
}

}  // namespace agentd
