// Module entry: registers every part of the addon. Loaded only by
// native/index.ts, which validates arguments before they reach these
// functions.
#include <napi.h>

#include <cmath>

#include "addon_data.h"
#include "capabilities.h"
#include "checksum.h"
#include "cuda_runtime.h"
#include "direct_file.h"
#include "file_lock.h"
#include "host_copy.h"
#include "host_region.h"
#include "native_error.h"
#include "ucx_transport.h"
#include "unix_socket.h"

namespace agentd {

size_t ToSize(Napi::Value value, const char* what) {
  double number = value.IsNumber() ? value.As<Napi::Number>().DoubleValue() : -1;
  if (!(number >= 0) || number > 9007199254740991.0 || std::floor(number) != number) {
    throw NativeError("ERR_ARG_INVALID", std::string(what) + " must be a non-negative safe integer");
  }
  return size_t(number);
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  env.SetInstanceData(new AddonData());
  RegisterCapabilities(env, exports);
  RegisterHostRegion(env, exports);
  RegisterHostCopy(env, exports);
  RegisterChecksum(env, exports);
  RegisterDirectFile(env, exports);
  RegisterFileLock(env, exports);
  RegisterUnixSocket(env, exports);
  RegisterCudaIpc(env, exports);
  RegisterUcx(env, exports);
  return exports;
}

}  // namespace agentd

static Napi::Object InitAgentdNative(Napi::Env env, Napi::Object exports) {
  return agentd::Init(env, exports);
}

NODE_API_MODULE(agentd_native, InitAgentdNative)
