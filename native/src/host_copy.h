#pragma once

#include <napi.h>

namespace agentd {

void RegisterHostCopy(Napi::Env env, Napi::Object exports);
void RegisterChecksum(Napi::Env env, Napi::Object exports);

}  // namespace agentd
