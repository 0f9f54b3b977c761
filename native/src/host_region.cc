#include "host_region.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <system_error>
#include <thread>
#include <vector>

#include "addon_data.h"
#include "cuda_runtime.h"
#include "native_error.h"
#include "promise_worker.h"

namespace agentd {

namespace {

constexpr size_t kHugePageBytes = size_t(2) << 20;
constexpr int kCapIpcLock = 14;

size_t RoundUp(size_t value, size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// CAP_IPC_LOCK in the effective set lets mlock ignore RLIMIT_MEMLOCK.
bool HasCapIpcLock() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      uint64_t caps = std::stoull(line.substr(7), nullptr, 16);
      return (caps >> kCapIpcLock) & 1;
    }
  }
  return false;
}

void CheckMemlockLimit(size_t bytes) {
  struct rlimit limit;
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return;
  if (limit.rlim_cur == RLIM_INFINITY || bytes <= limit.rlim_cur || HasCapIpcLock()) return;
  throw NativeError("ERR_MEMLOCK_LIMIT",
                    "pinned host pool of " + std::to_string(bytes) + " bytes exceeds RLIMIT_MEMLOCK (" +
                        std::to_string(limit.rlim_cur) +
                        " bytes). Raise the limit: LimitMEMLOCK=infinity in the systemd unit, "
                        "`ulimit -l unlimited` in the shell that starts agentd, or a memlock entry in "
                        "/etc/security/limits.conf; or configure a smaller host pool");
}

class PinnedHostPool final : public HostRegion {
 public:
  explicit PinnedHostPool(const HostPoolOptions& options) : options_(options) {
    if (options.lock) CheckMemlockLimit(options.bytes);
    Map();
    madvise(data_, mappedBytes_, MADV_DONTFORK);  // a forked child must not COW pinned pages
    if (options.lock) {
      if (mlock(data_, mappedBytes_) != 0) {
        int err = errno;
        Unmap();
        throw SystemError(err == ENOMEM || err == EPERM ? "ERR_MEMLOCK_LIMIT" : "ERR_SYSTEM", "mlock", err,
                          "mlock of the pinned host pool failed; raise RLIMIT_MEMLOCK "
                          "(systemd LimitMEMLOCK=infinity, `ulimit -l unlimited`)");
      }
      locked_ = true;
    } else {
      Prefault();
    }
    std::string reason;
    if (options.registerCuda && CudaUsable(&reason)) RegisterWithCuda();
  }

  ~PinnedHostPool() override {
    UnregisterFromCuda();
    Unmap();
  }

  size_t BytesToRegistrationBoundary(size_t offset) const override {
    if (registeredBytes_ == 0) return SIZE_MAX;
    return options_.cudaChunkBytes - offset % options_.cudaChunkBytes;
  }

  Napi::Object Describe(Napi::Env env) const override {
    Napi::Object info = Napi::Object::New(env);
    info.Set("kind", "hostPool");
    info.Set("bytes", Napi::Number::New(env, double(size_)));
    info.Set("mappedBytes", Napi::Number::New(env, double(mappedBytes_)));
    info.Set("hugePages", hugePages_);
    info.Set("locked", locked_);
    info.Set("cudaRegistered", registeredBytes_ > 0);
    info.Set("cudaRegistrationChunkBytes", Napi::Number::New(env, double(options_.cudaChunkBytes)));
    return info;
  }

 private:
  void Map() {
    size_ = options_.bytes;
    if (options_.tryHugetlb && size_ >= kHugePageBytes) {
      mappedBytes_ = RoundUp(size_, kHugePageBytes);
      void* p = mmap(nullptr, mappedBytes_, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
      if (p != MAP_FAILED) {
        data_ = static_cast<uint8_t*>(p);
        hugePages_ = "hugetlb";
        return;
      }
    }
    mappedBytes_ = RoundUp(size_, size_t(sysconf(_SC_PAGESIZE)));
    void* p = mmap(nullptr, mappedBytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw SystemError("ERR_SYSTEM", "mmap", errno, "mmap of the host pool failed");
    data_ = static_cast<uint8_t*>(p);
    // Before the pages are faulted in, so the kernel can back them with THP.
    hugePages_ = madvise(data_, mappedBytes_, MADV_HUGEPAGE) == 0 ? "transparent" : "none";
  }

  void Prefault() {
    long page = sysconf(_SC_PAGESIZE);
    for (size_t offset = 0; offset < mappedBytes_; offset += size_t(page)) {
      reinterpret_cast<volatile uint8_t*>(data_)[offset] = 0;
    }
  }

  void RegisterWithCuda() {
    for (size_t offset = 0; offset < mappedBytes_; offset += options_.cudaChunkBytes) {
      size_t chunk = std::min(options_.cudaChunkBytes, mappedBytes_ - offset);
      try {
        CudaHostRegister(data_ + offset, chunk);
      } catch (...) {
        // The constructor throws, so the destructor will not run: undo here.
        UnregisterFromCuda();
        Unmap();
        throw;
      }
      registeredBytes_ = offset + chunk;
    }
  }

  void UnregisterFromCuda() {
    for (size_t offset = 0; offset < registeredBytes_; offset += options_.cudaChunkBytes) {
      CudaHostUnregister(data_ + offset);
    }
    registeredBytes_ = 0;
  }

  void Unmap() {
    if (data_ != nullptr) munmap(data_, mappedBytes_);
    data_ = nullptr;
  }

  HostPoolOptions options_;
  size_t mappedBytes_ = 0;
  size_t registeredBytes_ = 0;
  const char* hugePages_ = "none";
  bool locked_ = false;
};

class SharedMemoryRegion final : public HostRegion {
 public:
  SharedMemoryRegion(const std::string& name, size_t minBytes) : name_(name) {
    std::string path = "/" + name;
    int fd = shm_open(path.c_str(), O_RDWR, 0);
    if (fd < 0) {
      int err = errno;
      throw SystemError(err == ENOENT ? "ERR_SHM_NOT_FOUND" : "ERR_SYSTEM", "shm_open", err,
                        "cannot open shared-memory object /dev/shm/" + name);
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      int err = errno;
      close(fd);
      throw SystemError("ERR_SYSTEM", "fstat", err, "cannot stat /dev/shm/" + name);
    }
    size_ = size_t(st.st_size);
    if (size_ == 0 || size_ < minBytes) {
      close(fd);
      throw NativeError("ERR_SHM_TOO_SMALL", "shared-memory object /dev/shm/" + name + " has " +
                                                 std::to_string(size_) + " bytes, " +
                                                 std::to_string(minBytes) + " required");
    }
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);  // the mapping keeps the object alive
    if (p == MAP_FAILED) throw SystemError("ERR_SYSTEM", "mmap", err, "cannot map /dev/shm/" + name);
    data_ = static_cast<uint8_t*>(p);
  }

  // Unmaps on a detached thread: when this mapping holds the last reference
  // to an unlinked object (a published weights region being retired), munmap
  // frees every page of it, ~0.25 s per 512 MiB of 4 KiB pages, which must not
  // run on the event loop (this destructor runs wherever the last reference
  // drops: close(), or a view's finalizer during garbage collection). Nothing
  // refers to the range once the last reference is gone.
  ~SharedMemoryRegion() override {
    void* data = data_;
    size_t size = size_;
    try {
      std::thread([data, size]() { munmap(data, size); }).detach();
    } catch (const std::system_error&) {
      munmap(data, size);  // no thread to be had: unmap here
    }
  }

  Napi::Object Describe(Napi::Env env) const override {
    Napi::Object info = Napi::Object::New(env);
    info.Set("kind", "sharedMemory");
    info.Set("name", name_);
    info.Set("bytes", Napi::Number::New(env, double(size_)));
    return info;
  }

 private:
  std::string name_;
};

class CreateHostPoolWorker final : public PromiseWorker {
 public:
  CreateHostPoolWorker(Napi::Env env, const HostPoolOptions& options)
      : PromiseWorker(env, "agentd:createHostPool"), options_(options) {}

 protected:
  void Run() override { pool_ = CreateHostPool(options_); }
  Napi::Value Result(Napi::Env env) override { return NativeRegion::Wrap(env, std::move(pool_)); }

 private:
  HostPoolOptions options_;
  std::shared_ptr<HostRegion> pool_;
};

}  // namespace

uint8_t* HostRegion::Span(size_t offset, size_t length) const {
  if (offset > size_ || length > size_ - offset) {
    throw NativeError("ERR_OUT_OF_RANGE", "range [" + std::to_string(offset) + ", +" +
                                              std::to_string(length) + ") lies outside a region of " +
                                              std::to_string(size_) + " bytes");
  }
  return data_ + offset;
}

size_t HostRegion::BytesToRegistrationBoundary(size_t) const { return SIZE_MAX; }

std::shared_ptr<HostRegion> CreateHostPool(const HostPoolOptions& options) {
  return std::make_shared<PinnedHostPool>(options);
}

std::shared_ptr<HostRegion> MapSharedMemory(const std::string& name, size_t minBytes) {
  return std::make_shared<SharedMemoryRegion>(name, minBytes);
}

// ---- JavaScript wrapper ----

Napi::Function NativeRegion::DefineClass(Napi::Env env) {
  return ObjectWrap<NativeRegion>::DefineClass(
      env, "NativeRegion",
      {InstanceMethod<&NativeRegion::Close>("close"), InstanceMethod<&NativeRegion::View>("view"),
       InstanceMethod<&NativeRegion::Info>("info")});
}

NativeRegion::NativeRegion(const Napi::CallbackInfo& info) : ObjectWrap<NativeRegion>(info) {
  if (info.Length() != 1 || !info[0].IsExternal()) {
    throw Napi::TypeError::New(info.Env(), "NativeRegion is created by the addon, not by `new`");
  }
  region_ = *info[0].As<Napi::External<std::shared_ptr<HostRegion>>>().Data();
}

Napi::Object NativeRegion::Wrap(Napi::Env env, std::shared_ptr<HostRegion> region) {
  Napi::External<std::shared_ptr<HostRegion>> handle =
      Napi::External<std::shared_ptr<HostRegion>>::New(env, &region);
  return GetAddonData(env).regionClass.New({handle});
}

std::shared_ptr<HostRegion> NativeRegion::From(Napi::Value value) {
  Napi::Env env = value.Env();
  if (!value.IsObject() || !value.As<Napi::Object>().InstanceOf(GetAddonData(env).regionClass.Value())) {
    throw NativeError("ERR_ARG_INVALID", "expected a NativeRegion");
  }
  NativeRegion* wrapper = Unwrap(value.As<Napi::Object>());
  if (!wrapper->region_) throw NativeError("ERR_RESOURCE_CLOSED", "the region was closed");
  return wrapper->region_;
}

// Drops this wrapper's reference; the memory is unmapped once in-flight
// operations and external views have released theirs. Idempotent.
Napi::Value NativeRegion::Close(const Napi::CallbackInfo& info) {
  region_.reset();
  return info.Env().Undefined();
}

// view(offset, length): a Buffer over the region's bytes (no copy). The
// Buffer keeps the mapping alive until it is garbage-collected.
Napi::Value NativeRegion::View(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return GuardedCall(env, [&]() -> Napi::Value {
    std::shared_ptr<HostRegion> region = From(Value());
    size_t offset = ToSize(info[0], "offset");
    size_t length = ToSize(info[1], "length");
    uint8_t* data = region->Span(offset, length);
    auto* keepAlive = new std::shared_ptr<HostRegion>(std::move(region));
    return Napi::Buffer<uint8_t>::New(
        env, data, length, [](Napi::Env, uint8_t*, std::shared_ptr<HostRegion>* hint) { delete hint; },
        keepAlive);
  });
}

Napi::Value NativeRegion::Info(const Napi::CallbackInfo& info) {
  return GuardedCall(info.Env(), [&]() -> Napi::Value { return From(Value())->Describe(info.Env()); });
}

// createHostPool(bytes, tryHugetlb, lock, registerCuda, cudaChunkBytes): Promise<NativeRegion>
static Napi::Value CreateHostPoolJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return GuardedCall(env, [&]() -> Napi::Value {
    HostPoolOptions options;
    options.bytes = ToSize(info[0], "bytes");
    options.tryHugetlb = info[1].ToBoolean();
    options.lock = info[2].ToBoolean();
    options.registerCuda = info[3].ToBoolean();
    options.cudaChunkBytes = ToSize(info[4], "cudaChunkBytes");
    if (options.bytes == 0 || options.cudaChunkBytes == 0) {
      throw NativeError("ERR_ARG_INVALID", "pool and chunk sizes must be positive");
    }
    return (new CreateHostPoolWorker(env, options))->Start();
  });
}

// openSharedMemory(name, minBytes): NativeRegion. Synchronous: mapping does
// not fault pages in.
static Napi::Value OpenSharedMemoryJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return GuardedCall(env, [&]() -> Napi::Value {
    std::string name = info[0].As<Napi::String>().Utf8Value();
    return NativeRegion::Wrap(env, MapSharedMemory(name, ToSize(info[1], "minBytes")));
  });
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// Faults the pages of [data, data + length) in for writing, on a worker
// thread (MADV_POPULATE_WRITE): afterwards passes over the range take no page
// faults, and a filesystem that cannot hold them has failed here (rejected as
// ERR_SYSTEM). Resolves true when done, false on a kernel without it (< 5.14:
// EINVAL), where nothing was allocated; no fallback touches pages itself,
// because a touch of a shared mapping whose filesystem is full raises SIGBUS
// where madvise returns an error.
class PopulateWorker final : public PromiseWorker {
 public:
  PopulateWorker(Napi::Env env, std::shared_ptr<HostRegion> owner, uint8_t* data, size_t length)
      : PromiseWorker(env, "agentd:populate"), owner_(std::move(owner)), data_(data), length_(length) {}

 protected:
  void Run() override {
    if (length_ == 0) return;
    uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    uintptr_t start = reinterpret_cast<uintptr_t>(data_) & ~(page - 1);
    uintptr_t end = reinterpret_cast<uintptr_t>(data_) + length_;
    if (madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_WRITE) == 0) return;
    int err = errno;
    if (err == EINVAL) {  // the kernel does not know MADV_POPULATE_WRITE
      supported_ = false;
      return;
    }
    throw SystemError("ERR_SYSTEM", "madvise", err, "cannot populate the mapping");
  }

  Napi::Value Result(Napi::Env env) override { return Napi::Boolean::New(env, supported_); }

 private:
  bool supported_ = true;
  std::shared_ptr<HostRegion> owner_;
  uint8_t* data_;
  size_t length_;
};

// populateRegion(region, offset, length): Promise<boolean> (false: the kernel cannot)
static Napi::Value PopulateRegionJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return GuardedCall(env, [&]() -> Napi::Value {
    std::shared_ptr<HostRegion> region = NativeRegion::From(info[0]);
    size_t length = ToSize(info[2], "length");
    uint8_t* data = region->Span(ToSize(info[1], "offset"), length);
    return (new PopulateWorker(env, region, data, length))->Start();
  });
}

void RegisterHostRegion(Napi::Env env, Napi::Object exports) {
  Napi::Function regionClass = NativeRegion::DefineClass(env);
  GetAddonData(env).regionClass = Napi::Persistent(regionClass);
  exports.Set("NativeRegion", regionClass);
  exports.Set("createHostPool", Napi::Function::New(env, CreateHostPoolJs, "createHostPool"));
  exports.Set("openSharedMemory", Napi::Function::New(env, OpenSharedMemoryJs, "openSharedMemory"));
  exports.Set("populateRegion", Napi::Function::New(env, PopulateRegionJs, "populateRegion"));
}

}  // namespace agentd
