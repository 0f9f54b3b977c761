// Files for the NVMe tier: O_DIRECT where the filesystem supports it, else
// buffered I/O (+ fdatasync on request), with the choice and the alignment
// visible in the file's info().
#pragma once

#include <napi.h>

namespace agentd {

void RegisterDirectFile(Napi::Env env, Napi::Object exports);

}  // namespace agentd
