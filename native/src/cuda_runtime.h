// What the rest of the addon needs from CUDA. Implemented in cuda_ipc.cc;
// without AGENTD_WITH_CUDA every function reports CUDA as unavailable.
#pragma once

#include <napi.h>

#include <cstddef>
#include <string>

namespace agentd {

// Whether a CUDA device is usable; when not, `reason` says why (the CUDA
// error name and text, or that the addon was built without CUDA). Any thread.
bool CudaUsable(std::string* reason);

// cudaHostRegister / cudaHostUnregister of one chunk. Register throws
// NativeError ERR_CUDA. Any thread.
void CudaHostRegister(void* ptr, size_t bytes);
void CudaHostUnregister(void* ptr);

// Device enumeration and runtime versions for `capabilities.cuda`. Main thread.
Napi::Object DescribeCuda(Napi::Env env);

void RegisterCudaIpc(Napi::Env env, Napi::Object exports);

}  // namespace agentd
