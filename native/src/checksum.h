#pragma once

#include <napi.h>

namespace agentd {

// checksumRegion / checksumBuffer: CRC-32C on native threads (checksum.cc).
void RegisterChecksum(Napi::Env env, Napi::Object exports);

}  // namespace agentd
