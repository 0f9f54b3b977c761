// Errors raised by native code. C++ code throws NativeError; the boundary
// (sync functions through GuardedCall, async workers in PromiseWorker) turns it
// into a JavaScript Error with a stable `code` (one of the ERR_* codes that
// native/index.ts maps to AgentError), plus `errno` / `syscall` when an OS call
// failed and `cudaError` when a CUDA call failed.
#pragma once

#include <napi.h>

#include <stdexcept>
#include <string>

namespace agentd {

struct NativeError : std::runtime_error {
  NativeError(std::string code, const std::string& message)
      : std::runtime_error(message), code(std::move(code)) {}

  std::string code;
  std::string errnoName;  // e.g. "ENOENT"; empty when no OS call failed
  std::string syscall;    // e.g. "open"; empty when no OS call failed
  std::string cudaError;  // e.g. "cudaErrorInvalidValue"; empty otherwise
};

// The symbolic name of an errno value ("ENOENT"), or "E<number>".
std::string ErrnoName(int err);

// An error for a failed OS call: message "<what>: <strerror> (<ENAME>)".
NativeError SystemError(const std::string& code, const std::string& syscall, int err,
                        const std::string& what);

// Converts to the JavaScript error described above. Main thread only.
Napi::Error ToJsError(Napi::Env env, const NativeError& error);

// Runs `body` and rethrows a NativeError as a JavaScript exception.
template <typename Body>
Napi::Value GuardedCall(Napi::Env env, Body body) {
  try {
    return body();
  } catch (const NativeError& error) {
    throw ToJsError(env, error);
  }
}

}  // namespace agentd
