// The one base for asynchronous native operations. A subclass does its bulk
// work in Run() on a libuv worker thread (never touching JavaScript values
// there) and builds its result in Result() on the main thread. The worker
// holds references to every JavaScript value passed to Retain() (buffers,
// wrapped regions) until it has settled, so the memory it works on cannot be
// collected while native code uses it. Native resources it uses are held by
// shared_ptr in the subclass for the same reason.
#pragma once

#include <napi.h>

#include <exception>
#include <vector>

#include "native_error.h"

namespace agentd {

class PromiseWorker : public Napi::AsyncWorker {
 public:
  explicit PromiseWorker(Napi::Env env, const char* resourceName)
      : Napi::AsyncWorker(env, resourceName), deferred_(Napi::Promise::Deferred::New(env)) {}

  // Keeps `value` referenced until the promise settles. Main thread.
  void Retain(Napi::Value value) {
    if (value.IsObject()) retained_.push_back(Napi::Persistent(value.As<Napi::Object>()));
  }

  // Queues the worker (which then owns itself) and returns its promise.
  Napi::Promise Start() {
    Napi::Promise promise = deferred_.Promise();
    Queue();
    return promise;
  }

 protected:
  // The bulk work. Worker thread; report failure by throwing NativeError.
  virtual void Run() = 0;

  // The fulfilment value. Main thread, only after Run() succeeded.
  virtual Napi::Value Result(Napi::Env env) { return env.Undefined(); }

 private:
  void Execute() override {
    try {
      Run();
    } catch (const NativeError& error) {
      failure_ = error;
      failed_ = true;
    } catch (const std::exception& error) {
      failure_ = NativeError("ERR_INTERNAL", error.what());
      failed_ = true;
    }
  }

  void OnOK() override {
    Napi::Env env = Env();
    Napi::HandleScope scope(env);
    if (failed_) {
      deferred_.Reject(ToJsError(env, failure_).Value());
      return;
    }
    try {
      deferred_.Resolve(Result(env));
    } catch (const Napi::Error& error) {
      deferred_.Reject(error.Value());
    }
  }

  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }

  Napi::Promise::Deferred deferred_;
  std::vector<Napi::ObjectReference> retained_;
  NativeError failure_{"ERR_INTERNAL", ""};
  bool failed_ = false;
};

}  // namespace agentd
