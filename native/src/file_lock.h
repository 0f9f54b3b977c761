#pragma once

#include <napi.h>

namespace agentd {

void RegisterFileLock(Napi::Env env, Napi::Object exports);

}  // namespace agentd
