#pragma once

#include <napi.h>

namespace agentd {

void RegisterUnixSocket(Napi::Env env, Napi::Object exports);

}  // namespace agentd
