// Host memory the agent copies to and from: the pinned host pool and mapped
// POSIX shared-memory objects. JavaScript holds a NativeRegion wrapper; native
// code holds shared_ptr<HostRegion>, so a region closed by JavaScript stays
// mapped until the last in-flight operation and the last external view of it
// are gone.
#pragma once

#include <napi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace agentd {

class HostRegion {
 public:
  virtual ~HostRegion() = default;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  // Pointer to [offset, offset + length); throws ERR_OUT_OF_RANGE when the
  // range does not lie inside the region. Any thread.
  uint8_t* Span(size_t offset, size_t length) const;

  // Bytes from `offset` up to the next CUDA host registration boundary
  // (SIZE_MAX when the region is not registered). A single async CUDA copy
  // must not cross one.
  virtual size_t BytesToRegistrationBoundary(size_t offset) const;

  // Static description for JavaScript. Main thread.
  virtual Napi::Object Describe(Napi::Env env) const = 0;

 protected:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Options of the pinned host pool, validated by TypeScript.
struct HostPoolOptions {
  size_t bytes = 0;
  bool tryHugetlb = true;    // MAP_HUGETLB first, else transparent huge pages
  bool lock = true;          // mlock (checked against RLIMIT_MEMLOCK first)
  bool registerCuda = true;  // cudaHostRegister when a CUDA device is usable
  size_t cudaChunkBytes = size_t(4) << 30;
};

// Maps, pre-faults, locks and registers the pool. Blocking; call off the main
// thread. Throws NativeError (ERR_MEMLOCK_LIMIT with how to raise the limit).
std::shared_ptr<HostRegion> CreateHostPool(const HostPoolOptions& options);

// Maps /dev/shm/<name> read-write, whole. Throws ERR_SHM_NOT_FOUND, or
// ERR_SHM_TOO_SMALL when the object is smaller than `minBytes`.
std::shared_ptr<HostRegion> MapSharedMemory(const std::string& name, size_t minBytes);

// The JavaScript wrapper class.
class NativeRegion : public Napi::ObjectWrap<NativeRegion> {
 public:
  static Napi::Function DefineClass(Napi::Env env);
  static Napi::Object Wrap(Napi::Env env, std::shared_ptr<HostRegion> region);
  // The region behind a NativeRegion argument; throws when it is not one or
  // was closed. Main thread.
  static std::shared_ptr<HostRegion> From(Napi::Value value);

  explicit NativeRegion(const Napi::CallbackInfo& info);

 private:
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value View(const Napi::CallbackInfo& info);
  Napi::Value Info(const Napi::CallbackInfo& info);

  std::shared_ptr<HostRegion> region_;
};

void RegisterHostRegion(Napi::Env env, Napi::Object exports);

}  // namespace agentd
