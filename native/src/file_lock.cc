// Advisory whole-file locks Node.js has no API for: flock(2) on a descriptor
// JavaScript opened. The lock belongs to the open file description, so it
// lasts until that descriptor is closed, by the process or by the kernel
// when the process dies however it dies (SIGKILL included): a crashed holder
// never leaves a lock behind. A quick syscall; runs on the main thread.
#include "file_lock.h"

#include <errno.h>
#include <sys/file.h>

#include "native_error.h"

namespace agentd {

namespace {

// tryLockExclusive(fd): true when this descriptor now holds an exclusive
// flock on its file (or already did), false when another open file
// description holds a lock on it. Never blocks. Throws ERR_SYSTEM otherwise.
Napi::Value TryLockExclusiveJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return GuardedCall(env, [&]() -> Napi::Value {
    int fd = info[0].As<Napi::Number>().Int32Value();
    int result;
    do {
      result = flock(fd, LOCK_EX | LOCK_NB);
    } while (result != 0 && errno == EINTR);
    if (result == 0) return Napi::Boolean::New(env, true);
    if (errno == EWOULDBLOCK) return Napi::Boolean::New(env, false);
    throw SystemError("ERR_SYSTEM", "flock", errno, "cannot lock fd " + std::to_string(fd));
  });
}

}  // namespace

void RegisterFileLock(Napi::Env env, Napi::Object exports) {
  exports.Set("tryLockExclusive", Napi::Function::New(env, TryLockExclusiveJs, "tryLockExclusive"));
}

}  // namespace agentd
