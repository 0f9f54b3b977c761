#pragma once

#include <napi.h>

namespace agentd {

void RegisterCapabilities(Napi::Env env, Napi::Object exports);

}  // namespace agentd
