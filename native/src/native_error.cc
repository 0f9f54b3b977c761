#include "native_error.h"

#include <string.h>

namespace agentd {

std::string ErrnoName(int err) {
  const char* name = strerrorname_np(err);
  return name != nullptr ? std::string(name) : "E" + std::to_string(err);
}

NativeError SystemError(const std::string& code, const std::string& syscall, int err,
                        const std::string& what) {
  NativeError error(code, what + ": " + strerror(err) + " (" + ErrnoName(err) + ")");
  error.errnoName = ErrnoName(err);
  error.syscall = syscall;
  return error;
}

Napi::Error ToJsError(Napi::Env env, const NativeError& error) {
  Napi::Error js = Napi::Error::New(env, error.what());
  js.Set("code", Napi::String::New(env, error.code));
  if (!error.errnoName.empty()) js.Set("errno", Napi::String::New(env, error.errnoName));
  if (!error.syscall.empty()) js.Set("syscall", Napi::String::New(env, error.syscall));
  if (!error.cudaError.empty()) js.Set("cudaError", Napi::String::New(env, error.cudaError));
  return js;
}

}  // namespace agentd
