// The facts native/index.ts cannot learn from JavaScript: resource limits,
// CPU features, thread pools, CUDA. Probed once at load, main thread.
#include "capabilities.h"

#include <sys/resource.h>

#include <cmath>

#include "crc32c.h"
#include "cuda_runtime.h"
#include "task_pool.h"

namespace agentd {

namespace {

Napi::Value LimitValue(Napi::Env env, rlim_t value) {
  return Napi::Number::New(env, value == RLIM_INFINITY ? INFINITY : double(value));
}

// probeCapabilities(): { memlock: { soft, hard }, crc32cHardware, cpuThreads,
// ioMaxQueueDepth, cuda }. Limits in bytes; Infinity = unlimited.
Napi::Value ProbeCapabilitiesJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object result = Napi::Object::New(env);
  Napi::Object memlock = Napi::Object::New(env);
  struct rlimit limit;
  if (getrlimit(RLIMIT_MEMLOCK, &limit) == 0) {
    memlock.Set("soft", LimitValue(env, limit.rlim_cur));
    memlock.Set("hard", LimitValue(env, limit.rlim_max));
  }
  result.Set("memlock", memlock);
  result.Set("crc32cHardware", Crc32cHardware());
  result.Set("cpuThreads", Napi::Number::New(env, double(CpuPool().maxThreads())));
  result.Set("ioMaxQueueDepth", Napi::Number::New(env, double(kMaxQueueDepth)));
  result.Set("cuda", DescribeCuda(env));
  return result;
}

}  // namespace

void RegisterCapabilities(Napi::Env env, Napi::Object exports) {
  exports.Set("probeCapabilities", Napi::Function::New(env, ProbeCapabilitiesJs, "probeCapabilities"));
}

}  // namespace agentd
