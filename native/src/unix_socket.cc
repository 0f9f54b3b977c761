// Unix-socket calls Node.js has no API for: the peer credentials of a
// connected socket (to identify the local API's caller) and sending one
// datagram (systemd's sd_notify protocol). Both are quick syscalls and run on
// the main thread.
#include "unix_socket.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "addon_data.h"
#include "native_error.h"

namespace agentd {

namespace {

// peerCredentials(fd): { pid, uid, gid } via SO_PEERCRED.
Napi::Value PeerCredentialsJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return GuardedCall(env, [&]() -> Napi::Value {
    int fd = info[0].As<Napi::Number>().Int32Value();
    struct ucred cred;
    socklen_t length = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) {
      throw SystemError("ERR_SYSTEM", "getsockopt", errno,
                        "cannot read SO_PEERCRED of fd " + std::to_string(fd));
    }
    Napi::Object result = Napi::Object::New(env);
    result.Set("pid", Napi::Number::New(env, cred.pid));
    result.Set("uid", Napi::Number::New(env, cred.uid));
    result.Set("gid", Napi::Number::New(env, cred.gid));
    return result;
  });
}

// sendUnixDatagram(path, message): sends `message` (a Uint8Array) as one
// datagram to the AF_UNIX socket at `path`; a leading '@' selects the
// abstract namespace. Throws with the errno name on failure.
Napi::Value SendUnixDatagramJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return GuardedCall(env, [&]() -> Napi::Value {
    std::string path = info[0].As<Napi::String>().Utf8Value();
    Napi::Uint8Array message = info[1].As<Napi::Uint8Array>();
    struct sockaddr_un address;
    std::memset(&address, 0, sizeof address);
    address.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof address.sun_path) {
      throw NativeError("ERR_ARG_INVALID", "unix socket path must have 1 to 107 bytes");
    }
    std::memcpy(address.sun_path, path.data(), path.size());
    if (path[0] == '@') address.sun_path[0] = '\0';
    socklen_t addressLength =
        socklen_t(offsetof(struct sockaddr_un, sun_path) + path.size() + (path[0] == '@' ? 0 : 1));
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw SystemError("ERR_SYSTEM", "socket", errno, "cannot create a datagram socket");
    ssize_t sent = sendto(fd, message.Data(), message.ByteLength(), MSG_NOSIGNAL,
                          reinterpret_cast<struct sockaddr*>(&address), addressLength);
    int err = errno;
    close(fd);
    if (sent < 0) throw SystemError("ERR_SYSTEM", "sendto", err, "cannot send to " + path);
    return env.Undefined();
  });
}

}  // namespace

void RegisterUnixSocket(Napi::Env env, Napi::Object exports) {
  exports.Set("peerCredentials", Napi::Function::New(env, PeerCredentialsJs, "peerCredentials"));
  exports.Set("sendUnixDatagram", Napi::Function::New(env, SendUnixDatagramJs, "sendUnixDatagram"));
}

}  // namespace agentd
