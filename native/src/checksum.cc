// CRC-32C over region ranges and JavaScript buffers, on native threads.
#include "checksum.h"

#include <vector>

#include "addon_data.h"
#include "crc32c.h"
#include "host_region.h"
#include "promise_worker.h"
#include "task_pool.h"

namespace agentd {

namespace {

constexpr size_t kMinSliceBytes = size_t(8) << 20;

class ChecksumWorker final : public PromiseWorker {
 public:
  // `owner` keeps the bytes alive (a region); a JavaScript buffer is Retain()ed.
  ChecksumWorker(Napi::Env env, std::shared_ptr<HostRegion> owner, const uint8_t* data, size_t length,
                 size_t threads)
      : PromiseWorker(env, "agentd:checksum"),
        owner_(std::move(owner)),
        data_(data),
        length_(length),
        threads_(threads) {}

 protected:
  void Run() override {
    TaskPool& pool = CpuPool();
    size_t parallelism = threads_ == 0 ? pool.maxThreads() : threads_;
    Slices slices = PlanSlices(length_, parallelism, kMinSliceBytes, 4096);
    if (slices.count <= 1) {
      crc_ = Crc32c(0, data_, length_);
      return;
    }
    std::vector<uint32_t> parts(slices.count);
    pool.ParallelFor(slices.count, parallelism, [&](size_t i) {
      size_t offset = i * slices.sliceBytes;
      parts[i] = Crc32c(0, data_ + offset, std::min(slices.sliceBytes, length_ - offset));
    });
    crc_ = parts[0];
    for (size_t i = 1; i < slices.count; ++i) {
      size_t offset = i * slices.sliceBytes;
      crc_ = Crc32cCombine(crc_, parts[i], std::min(slices.sliceBytes, length_ - offset));
    }
  }

  Napi::Value Result(Napi::Env env) override { return Napi::Number::New(env, crc_); }

 private:
  std::shared_ptr<HostRegion> owner_;
  const uint8_t* data_;
  size_t length_;
  size_t threads_;
  uint32_t crc_ = 0;
};

// checksumRegion(region, offset, length, threads): Promise<number> (uint32)
Napi::Value ChecksumRegionJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return GuardedCall(env, [&]() -> Napi::Value {
    std::shared_ptr<HostRegion> region = NativeRegion::From(info[0]);
    size_t length = ToSize(info[2], "length");
    const uint8_t* data = region->Span(ToSize(info[1], "offset"), length);
    return (new ChecksumWorker(env, region, data, length, ToSize(info[3], "threads")))->Start();
  });
}

// checksumBuffer(buffer): Promise<number> (uint32)
Napi::Value ChecksumBufferJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return GuardedCall(env, [&]() -> Napi::Value {
    if (!info[0].IsTypedArray()) throw NativeError("ERR_ARG_INVALID", "expected a Uint8Array");
    Napi::Uint8Array bytes = info[0].As<Napi::Uint8Array>();
    auto* worker = new ChecksumWorker(env, nullptr, bytes.Data(), bytes.ByteLength(), 0);
    worker->Retain(bytes);
    return worker->Start();
  });
}

}  // namespace

void RegisterChecksum(Napi::Env env, Napi::Object exports) {
  exports.Set("checksumRegion", Napi::Function::New(env, ChecksumRegionJs, "checksumRegion"));
  exports.Set("checksumBuffer", Napi::Function::New(env, ChecksumBufferJs, "checksumBuffer"));
}

}  // namespace agentd
