#pragma once

#include <napi.h>

namespace agentd {

// copyHost: host-to-host bulk copies between regions (host_copy.cc).
void RegisterHostCopy(Napi::Env env, Napi::Object exports);

}  // namespace agentd
