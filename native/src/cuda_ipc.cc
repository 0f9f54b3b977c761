// CUDA support: device enumeration, pinned-pool registration, and copies
// between a client's device memory (opened from a CUDA IPC handle) and host
// regions on agent-owned streams. Compiled only with AGENTD_WITH_CUDA; the
// runtime is linked statically and loads the driver lazily, so on a machine
// without a driver every entry point reports the CUDA error instead of the
// addon failing to load. Device memory is never exposed to JavaScript.
#include "cuda_runtime.h"

#include "addon_data.h"
#include "native_error.h"

#if AGENTD_WITH_CUDA

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "host_region.h"
#include "promise_worker.h"

namespace agentd {

namespace {

constexpr size_t kIpcHandleBytes = sizeof(cudaIpcMemHandle_t);
static_assert(kIpcHandleBytes == 64, "cudaIpcMemHandle_t is 64 bytes");

std::string CudaErrorText(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

NativeError CudaError(cudaError_t err, const std::string& what) {
  NativeError error("ERR_CUDA", what + ": " + CudaErrorText(err));
  error.cudaError = cudaGetErrorName(err);
  return error;
}

void CudaCheck(cudaError_t err, const std::string& what) {
  if (err != cudaSuccess) throw CudaError(err, what);
}

struct Usability {
  bool usable = false;
  int devices = 0;
  std::string reason;
};

const Usability& ProbeUsability() {
  static const Usability usability = [] {
    Usability u;
    cudaError_t err = cudaGetDeviceCount(&u.devices);
    if (err != cudaSuccess) {
      u.reason = CudaErrorText(err);
      u.devices = 0;
    } else if (u.devices == 0) {
      u.reason = "no CUDA device found";
    } else {
      u.usable = true;
    }
    return u;
  }();
  return usability;
}

// cuMemGetAddressRange through the runtime's driver entry point (no link-time
// dependency on libcuda). Returns the size of the allocation containing
// `pointer`, or 0 when it cannot be learned.
size_t AllocationBytes(void* pointer) {
  using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static GetAddressRange getRange = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status;
#if CUDART_VERSION >= 12050
    cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &status);
#else
    cudaError_t err = cudaGetDriverEntryPoint("cuMemGetAddressRange", &fn, cudaEnableDefault, &status);
#endif
    return err == cudaSuccess && status == cudaDriverEntryPointSuccess ? reinterpret_cast<GetAddressRange>(fn)
                                                                       : nullptr;
  }();
  if (getRange == nullptr) return 0;
  CUdeviceptr base = 0;
  size_t bytes = 0;
  if (getRange(&base, &bytes, reinterpret_cast<CUdeviceptr>(pointer)) != CUDA_SUCCESS) return 0;
  return bytes - size_t(reinterpret_cast<CUdeviceptr>(pointer) - base);
}

using IpcKey = std::pair<int, std::array<uint8_t, kIpcHandleBytes>>;

// One opened IPC handle. CUDA refuses to open the same handle twice in one
// process, so opens are shared through MappingCache; the handle is closed
// when the last user (JavaScript handle or in-flight copy) lets go.
struct DeviceMapping {
  IpcKey key;
  void* base = nullptr;
  size_t bytes = 0;                 // allocation size from base; 0 = unknown
  std::atomic<int> openHandles{0};  // JavaScript handles not yet closed
  ~DeviceMapping();
};

class MappingCache {
 public:
  std::shared_ptr<DeviceMapping> Acquire(int device, const uint8_t* handleBytes) {
    IpcKey key{device, {}};
    std::memcpy(key.second.data(), handleBytes, kIpcHandleBytes);
    std::lock_guard<std::mutex> lock(mutex_);
    std::shared_ptr<DeviceMapping> mapping = entries_[key].lock();
    if (!mapping) {
      cudaIpcMemHandle_t handle;
      std::memcpy(&handle, handleBytes, kIpcHandleBytes);
      CudaCheck(cudaSetDevice(device), "cudaSetDevice");
      void* base = nullptr;
      CudaCheck(cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
      mapping = std::make_shared<DeviceMapping>();
      mapping->key = key;
      mapping->base = base;
      mapping->bytes = AllocationBytes(base);
      entries_[key] = mapping;
    }
    ++mapping->openHandles;
    return mapping;
  }

  void Forget(const IpcKey& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second.expired()) entries_.erase(it);
  }

 private:
  std::mutex mutex_;
  std::map<IpcKey, std::weak_ptr<DeviceMapping>> entries_;
};

MappingCache& Mappings() {
  static MappingCache* cache = new MappingCache();
  return *cache;
}

DeviceMapping::~DeviceMapping() {
  cudaSetDevice(key.first);
  cudaIpcCloseMemHandle(base);
  Mappings().Forget(key);
}

// Agent-owned non-blocking streams, reused across copies, per device.
class StreamPool {
 public:
  cudaStream_t Acquire(int device) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<cudaStream_t>& free = free_[device];
      if (!free.empty()) {
        cudaStream_t stream = free.back();
        free.pop_back();
        return stream;
      }
    }
    cudaStream_t stream;
    CudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return stream;
  }

  void Release(int device, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[device].push_back(stream);
  }

 private:
  std::mutex mutex_;
  std::map<int, std::vector<cudaStream_t>> free_;
};

StreamPool& Streams() {
  static StreamPool* pool = new StreamPool();
  return *pool;
}

class NativeDeviceMapping : public Napi::ObjectWrap<NativeDeviceMapping> {
 public:
  static Napi::Function DefineClass(Napi::Env env) {
    return ObjectWrap<NativeDeviceMapping>::DefineClass(
        env, "NativeDeviceMapping",
        {InstanceMethod<&NativeDeviceMapping::Info>("info"),
         InstanceMethod<&NativeDeviceMapping::Close>("close")});
  }

  static Napi::Object Wrap(Napi::Env env, std::shared_ptr<DeviceMapping> mapping) {
    auto handle = Napi::External<std::shared_ptr<DeviceMapping>>::New(env, &mapping);
    return GetAddonData(env).deviceMappingClass.New({handle});
  }

  static std::shared_ptr<DeviceMapping> From(Napi::Value value) {
    Napi::Env env = value.Env();
    if (!value.IsObject() ||
        !value.As<Napi::Object>().InstanceOf(GetAddonData(env).deviceMappingClass.Value())) {
      throw NativeError("ERR_ARG_INVALID", "expected a NativeDeviceMapping");
    }
    NativeDeviceMapping* wrapper = Unwrap(value.As<Napi::Object>());
    if (!wrapper->mapping_) throw NativeError("ERR_RESOURCE_CLOSED", "the device mapping was closed");
    return wrapper->mapping_;
  }

  explicit NativeDeviceMapping(const Napi::CallbackInfo& info) : ObjectWrap<NativeDeviceMapping>(info) {
    if (info.Length() != 1 || !info[0].IsExternal()) {
      throw Napi::TypeError::New(info.Env(), "NativeDeviceMapping is created by the addon, not by `new`");
    }
    mapping_ = *info[0].As<Napi::External<std::shared_ptr<DeviceMapping>>>().Data();
  }

  ~NativeDeviceMapping() override { Release(); }

 private:
  void Release() {
    if (mapping_) --mapping_->openHandles;
    mapping_.reset();
  }

  Napi::Value Info(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return GuardedCall(env, [&]() -> Napi::Value {
      std::shared_ptr<DeviceMapping> mapping = From(Value());
      Napi::Object result = Napi::Object::New(env);
      result.Set("device", mapping->key.first);
      result.Set("sizeBytes", Napi::Number::New(env, double(mapping->bytes)));
      result.Set("openHandles", mapping->openHandles.load());
      return result;
    });
  }

  // Idempotent; the IPC handle closes after the last handle and copy.
  Napi::Value Close(const Napi::CallbackInfo& info) {
    Release();
    return info.Env().Undefined();
  }

  std::shared_ptr<DeviceMapping> mapping_;
};

// Copies between device memory (mapping base + deviceOffset) and a host
// region in chunks of at most chunkBytes, none crossing a host registration
// boundary, on one agent-owned stream; settles after the stream completed.
class DeviceCopyWorker final : public PromiseWorker {
 public:
  // `waitEvent`: a cudaIpcEventHandle_t the producer recorded after its last
  // write (PyTorch's event_sync_required); the copy waits for it. May be null.
  DeviceCopyWorker(Napi::Env env, bool toDevice, std::shared_ptr<DeviceMapping> mapping, size_t deviceOffset,
                   std::shared_ptr<HostRegion> region, size_t regionOffset, size_t length, size_t chunkBytes,
                   const uint8_t* waitEvent)
      : PromiseWorker(env, toDevice ? "agentd:copyToDevice" : "agentd:copyFromDevice"),
        toDevice_(toDevice),
        mapping_(std::move(mapping)),
        region_(std::move(region)),
        deviceOffset_(deviceOffset),
        regionOffset_(regionOffset),
        length_(length),
        chunkBytes_(std::max<size_t>(1, chunkBytes)),
        hasWaitEvent_(waitEvent != nullptr) {
    if (hasWaitEvent_) std::memcpy(&waitEvent_, waitEvent, sizeof waitEvent_);
    region_->Span(regionOffset, length);
    if (mapping_->bytes != 0 && (deviceOffset > mapping_->bytes || length > mapping_->bytes - deviceOffset)) {
      throw NativeError("ERR_OUT_OF_RANGE", "device range [" + std::to_string(deviceOffset) + ", +" +
                                                std::to_string(length) + ") lies outside the allocation of " +
                                                std::to_string(mapping_->bytes) + " bytes");
    }
  }

 protected:
  void Run() override {
    int device = mapping_->key.first;
    CudaCheck(cudaSetDevice(device), "cudaSetDevice");
    cudaEvent_t producerDone = nullptr;
    if (hasWaitEvent_) CudaCheck(cudaIpcOpenEventHandle(&producerDone, waitEvent_), "cudaIpcOpenEventHandle");
    cudaStream_t stream = Streams().Acquire(device);
    cudaError_t failure = cudaSuccess;
    const char* failedCall = "";
    if (producerDone != nullptr) {
      failure = cudaStreamWaitEvent(stream, producerDone, 0);
      failedCall = "cudaStreamWaitEvent";
    }
    uint8_t* deviceBase = static_cast<uint8_t*>(mapping_->base) + deviceOffset_;
    for (size_t done = 0; done < length_ && failure == cudaSuccess;) {
      size_t hostOffset = regionOffset_ + done;
      size_t n = std::min({chunkBytes_, length_ - done, region_->BytesToRegistrationBoundary(hostOffset)});
      uint8_t* host = region_->data() + hostOffset;
      failure = toDevice_ ? cudaMemcpyAsync(deviceBase + done, host, n, cudaMemcpyHostToDevice, stream)
                          : cudaMemcpyAsync(host, deviceBase + done, n, cudaMemcpyDeviceToHost, stream);
      failedCall = "cudaMemcpyAsync";
      done += n;
    }
    cudaError_t synced = cudaStreamSynchronize(stream);  // also after a failed enqueue
    Streams().Release(device, stream);
    if (producerDone != nullptr) cudaEventDestroy(producerDone);
    if (failure != cudaSuccess) throw CudaError(failure, failedCall);
    if (synced != cudaSuccess) throw CudaError(synced, "cudaStreamSynchronize");
  }

 private:
  bool toDevice_;
  std::shared_ptr<DeviceMapping> mapping_;
  std::shared_ptr<HostRegion> region_;
  size_t deviceOffset_;
  size_t regionOffset_;
  size_t length_;
  size_t chunkBytes_;
  bool hasWaitEvent_;
  cudaIpcEventHandle_t waitEvent_;
};

Napi::Object DescribeDevice(Napi::Env env, int index) {
  Napi::Object device = Napi::Object::New(env);
  cudaDeviceProp prop;
  CudaCheck(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  char uuid[64];
  const unsigned char* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  std::snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
                u[15]);
  char pciBusId[32] = "";
  cudaDeviceGetPCIBusId(pciBusId, sizeof pciBusId, index);
  device.Set("index", index);
  device.Set("name", prop.name);
  device.Set("uuid", uuid);
  device.Set("pciBusId", pciBusId);
  device.Set("totalMemoryBytes", Napi::Number::New(env, double(prop.totalGlobalMem)));
  device.Set("computeCapability", std::to_string(prop.major) + "." + std::to_string(prop.minor));
  return device;
}

// cudaOpenIpcHandle(device, handle: 64-byte Uint8Array): NativeDeviceMapping
Napi::Value OpenIpcHandleJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return GuardedCall(env, [&]() -> Napi::Value {
    int device = info[0].As<Napi::Number>().Int32Value();
    Napi::Uint8Array handle = info[1].As<Napi::Uint8Array>();
    if (handle.ByteLength() != kIpcHandleBytes)
      throw NativeError("ERR_ARG_INVALID", "IPC handle must be 64 bytes");
    std::string reason;
    if (!CudaUsable(&reason)) throw NativeError("ERR_CUDA_UNAVAILABLE", reason);
    return NativeDeviceMapping::Wrap(env, Mappings().Acquire(device, handle.Data()));
  });
}

// cudaCopy(toDevice, mapping, deviceOffset, region, regionOffset, length, chunkBytes,
//          waitEvent: 64-byte Uint8Array | undefined): Promise<void>
Napi::Value CudaCopyJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return GuardedCall(env, [&]() -> Napi::Value {
    const uint8_t* waitEvent = nullptr;
    if (info[7].IsTypedArray()) {
      Napi::Uint8Array event = info[7].As<Napi::Uint8Array>();
      if (event.ByteLength() != sizeof(cudaIpcEventHandle_t)) {
        throw NativeError("ERR_ARG_INVALID", "an IPC event handle must be 64 bytes");
      }
      waitEvent = event.Data();  // copied by the worker's constructor
    }
    auto* worker = new DeviceCopyWorker(env, info[0].ToBoolean(), NativeDeviceMapping::From(info[1]),
                                        ToSize(info[2], "deviceOffset"), NativeRegion::From(info[3]),
                                        ToSize(info[4], "regionOffset"), ToSize(info[5], "length"),
                                        ToSize(info[6], "chunkBytes"), waitEvent);
    return worker->Start();
  });
}

}  // namespace

bool CudaUsable(std::string* reason) {
  const Usability& u = ProbeUsability();
  if (!u.usable && reason != nullptr) *reason = u.reason;
  return u.usable;
}

void CudaHostRegister(void* ptr, size_t bytes) {
  CudaCheck(cudaHostRegister(ptr, bytes, cudaHostRegisterPortable), "cudaHostRegister");
}

void CudaHostUnregister(void* ptr) { cudaHostUnregister(ptr); }

Napi::Object DescribeCuda(Napi::Env env) {
  Napi::Object cuda = Napi::Object::New(env);
  int runtimeVersion = 0;
  int driverVersion = 0;
  cudaRuntimeGetVersion(&runtimeVersion);
  cudaDriverGetVersion(&driverVersion);
  const Usability& u = ProbeUsability();
  Napi::Array devices = Napi::Array::New(env);
  std::string reason = u.reason;
  if (u.usable) {
    try {
      for (int i = 0; i < u.devices; ++i) devices.Set(uint32_t(i), DescribeDevice(env, i));
    } catch (const NativeError& error) {
      reason = error.what();
    }
  }
  cuda.Set("compiled", true);
  cuda.Set("available", u.usable && reason.empty());
  cuda.Set("reason", reason.empty() ? env.Null() : Napi::String::New(env, reason));
  cuda.Set("runtimeVersion", runtimeVersion);
  cuda.Set("driverVersion", driverVersion);
  cuda.Set("devices", devices);
  return cuda;
}

void RegisterCudaIpc(Napi::Env env, Napi::Object exports) {
  Napi::Function mappingClass = NativeDeviceMapping::DefineClass(env);
  GetAddonData(env).deviceMappingClass = Napi::Persistent(mappingClass);
  exports.Set("cudaOpenIpcHandle", Napi::Function::New(env, OpenIpcHandleJs, "cudaOpenIpcHandle"));
  exports.Set("cudaCopy", Napi::Function::New(env, CudaCopyJs, "cudaCopy"));
}

}  // namespace agentd

#else  // !AGENTD_WITH_CUDA

namespace agentd {

static const char* const kNotCompiled = "agentd was built without CUDA (no CUDA toolkit found at build time)";

bool CudaUsable(std::string* reason) {
  if (reason != nullptr) *reason = kNotCompiled;
  return false;
}

void CudaHostRegister(void*, size_t) { throw NativeError("ERR_CUDA_UNAVAILABLE", kNotCompiled); }

void CudaHostUnregister(void*) {}

Napi::Object DescribeCuda(Napi::Env env) {
  Napi::Object cuda = Napi::Object::New(env);
  cuda.Set("compiled", false);
  cuda.Set("available", false);
  cuda.Set("reason", kNotCompiled);
  cuda.Set("runtimeVersion", 0);
  cuda.Set("driverVersion", 0);
  cuda.Set("devices", Napi::Array::New(env));
  return cuda;
}

void RegisterCudaIpc(Napi::Env, Napi::Object) {}

}  // namespace agentd

#endif
