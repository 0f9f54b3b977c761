// Per-environment state of the addon (one per Node.js main or worker thread).
#pragma once

#include <napi.h>

namespace agentd {

struct AddonData {
  Napi::FunctionReference regionClass;
  Napi::FunctionReference fileClass;
  Napi::FunctionReference deviceMappingClass;
};

inline AddonData& GetAddonData(Napi::Env env) { return *env.GetInstanceData<AddonData>(); }

// Reads a JavaScript number argument as a byte count or offset. TypeScript
// has validated it; this only guards against a caller bypassing it.
size_t ToSize(Napi::Value value, const char* what);

}  // namespace agentd
