// UCX (UCP) one-sided transfers; see ucx_transport.h.
//
// Threads: a UcxWorker is used from the JavaScript main thread only (its UCP
// worker is created UCS_THREAD_MODE_SINGLE). Progress is event driven: one
// waiter thread per worker sleeps in epoll_wait on the worker's event fd and,
// when UCX has something to do, asks the main thread (a thread-safe function)
// to progress and re-arm the worker; it waits again only after that. Idle, it
// costs no CPU. Completions of gets are collected during progress and told to
// JavaScript in one call (`onCompletions(ids, errors)`: errors[i] is "" or a
// UCX status string).
//
// Lifetime: a pending get holds the destination region (shared_ptr) until it
// completes; a mapped range holds its region until unmapped; close() force
// closes every endpoint, unmaps everything, stops the waiter and destroys the
// worker and context (pending gets complete with an error first).
#include "ucx_transport.h"

#include <cstdint>
#include <string>

#include "addon_data.h"
#include "host_region.h"
#include "native_error.h"

#ifdef AGENTD_WITH_UCX
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <ucs/config/global_opts.h>
#include <uct/api/uct.h>
#include <unistd.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>
#endif

namespace agentd {

#ifdef AGENTD_WITH_UCX

namespace {

// Progress-and-arm rounds before ProgressAndArm yields to the event loop.
constexpr int kArmAttempts = 16;

std::string StatusText(ucs_status_t status) { return ucs_status_string(status); }

void Check(ucs_status_t status, const char* what) {
  if (status != UCS_OK) throw NativeError("ERR_UCX", std::string(what) + ": " + StatusText(status));
}

// The transports this machine's UCX offers: every (transport, device) of every memory domain.
Napi::Array ListTransports(Napi::Env env) {
  Napi::Array list = Napi::Array::New(env);
  uct_component_h* components = nullptr;
  unsigned count = 0;
  if (uct_query_components(&components, &count) != UCS_OK) return list;
  uint32_t n = 0;
  for (unsigned c = 0; c < count; c++) {
    uct_component_attr_t attr = {};
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME | UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    if (uct_component_query(components[c], &attr) != UCS_OK) continue;
    std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = mds.data();
    if (uct_component_query(components[c], &attr) != UCS_OK) continue;
    for (const uct_md_resource_desc_t& md_desc : mds) {
      uct_md_config_t* config = nullptr;
      if (uct_md_config_read(components[c], nullptr, nullptr, &config) != UCS_OK) continue;
      uct_md_h md = nullptr;
      ucs_status_t opened = uct_md_open(components[c], md_desc.md_name, config, &md);
      uct_config_release(config);
      if (opened != UCS_OK) continue;
      uct_tl_resource_desc_t* resources = nullptr;
      unsigned resourceCount = 0;
      if (uct_md_query_tl_resources(md, &resources, &resourceCount) == UCS_OK) {
        for (unsigned r = 0; r < resourceCount; r++) {
          Napi::Object entry = Napi::Object::New(env);
          entry.Set("transport", resources[r].tl_name);
          entry.Set("device", resources[r].dev_name);
          list.Set(n++, entry);
        }
        uct_release_tl_resource_list(resources);
      }
      uct_md_close(md);
    }
  }
  uct_release_component_list(components);
  return list;
}

Napi::Value UcxInfoJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object result = Napi::Object::New(env);
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  result.Set("compiled", true);
  result.Set("version", std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release));
  result.Set("transports", ListTransports(env));
  return result;
}

class UcxWorker;

// One get in flight (one or more runs of remote bytes read into one destination): who to tell, the memory it
// writes, and how many of its UCX requests are still out (plus one while they are being started).
struct GetRequest {
  UcxWorker* worker;
  double id;
  std::shared_ptr<HostRegion> destination;
  size_t outstanding;
  ucs_status_t status;
};

struct Endpoint {
  ucp_ep_h ep = nullptr;
  // Created with peer error handling (UCX detects the peer's death; a forced close cancels its gets).
  bool peerFailure = true;
  // Set by the error handler: the peer failed or the connection broke.
  ucs_status_t failure = UCS_OK;
};

struct MappedRange {
  ucp_mem_h memh = nullptr;
  std::shared_ptr<HostRegion> region;
};

class UcxWorker : public Napi::ObjectWrap<UcxWorker> {
 public:
  static Napi::Function DefineClass(Napi::Env env) {
    return ObjectWrap<UcxWorker>::DefineClass(
        env, "UcxWorker",
        {
            InstanceMethod("address", &UcxWorker::Guarded<&UcxWorker::Address>),
            InstanceMethod("connect", &UcxWorker::Guarded<&UcxWorker::Connect>),
            InstanceMethod("endpointInfo", &UcxWorker::Guarded<&UcxWorker::EndpointInfo>),
            InstanceMethod("endpointFailure", &UcxWorker::Guarded<&UcxWorker::EndpointFailure>),
            InstanceMethod("closeEndpoint", &UcxWorker::Guarded<&UcxWorker::CloseEndpoint>),
            InstanceMethod("map", &UcxWorker::Guarded<&UcxWorker::Map>),
            InstanceMethod("unmap", &UcxWorker::Guarded<&UcxWorker::Unmap>),
            InstanceMethod("unpackRkey", &UcxWorker::Guarded<&UcxWorker::UnpackRkey>),
            InstanceMethod("destroyRkey", &UcxWorker::Guarded<&UcxWorker::DestroyRkey>),
            InstanceMethod("get", &UcxWorker::Guarded<&UcxWorker::Get>),
            InstanceMethod("close", &UcxWorker::Guarded<&UcxWorker::Close>),
        });
  }

  // new UcxWorker(onCompletions)
  explicit UcxWorker(const Napi::CallbackInfo& info) : ObjectWrap<UcxWorker>(info) {
    try {
      Start(info);
    } catch (const NativeError& error) {
      throw ToJsError(info.Env(), error);
    }
  }

  // Collected without close(): released without telling JavaScript anything (a finalizer may not call it).
  ~UcxWorker() override { Shutdown(false); }

 private:
  // A method as JavaScript calls it: a NativeError becomes a JavaScript error with its code.
  template <Napi::Value (UcxWorker::*Method)(const Napi::CallbackInfo&)>
  Napi::Value Guarded(const Napi::CallbackInfo& info) {
    return GuardedCall(info.Env(), [&] { return (this->*Method)(info); });
  }

  void Start(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[0].IsFunction()) throw NativeError("ERR_ARG_INVALID", "onCompletions must be a function");
    onCompletions_ = Napi::Persistent(info[0].As<Napi::Function>());
    ucp_config_t* config = nullptr;
    Check(ucp_config_read(nullptr, nullptr, &config), "reading the UCX configuration");
    ucp_params_t params = {};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    ucs_status_t status = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    Check(status, "ucp_init");
    ucp_worker_params_t wparams = {};
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    status = ucp_worker_create(context_, &wparams, &worker_);
    if (status != UCS_OK) {
      ucp_cleanup(context_);
      context_ = nullptr;
      Check(status, "ucp_worker_create");
    }
    int efd = -1;
    status = ucp_worker_get_efd(worker_, &efd);
    if (status != UCS_OK) {
      DestroyWorker();
      Check(status, "ucp_worker_get_efd (event-driven progress)");
    }
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    stop_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    epoll_event ev = {};
    ev.events = EPOLLIN;
    ev.data.fd = efd;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, efd, &ev);
    ev.data.fd = stop_;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, stop_, &ev);
    wake_ = Napi::ThreadSafeFunction::New(env, Napi::Function::New(env, [](const Napi::CallbackInfo&) {}),
                                          "agentd:ucxProgress", 0, 1);
    ProgressAndArm();
    waiter_ = std::thread([this, efd] { Wait(efd); });
  }

  // The waiter thread: sleeps until the worker's fd (or stop) is readable, has the main thread progress,
  // repeats.
  void Wait(int efd) {
    (void)efd;
    for (;;) {
      epoll_event ev[2];
      int n = epoll_wait(epoll_, ev, 2, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        return;
      }
      for (int i = 0; i < n; i++) {
        if (ev[i].data.fd == stop_) return;
      }
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (stopping_) return;
        rearmed_ = false;
      }
      // Runs on the main thread, never after Shutdown (which aborts the function first).
      napi_status queued = wake_.BlockingCall(this, [](Napi::Env, Napi::Function, UcxWorker* self) {
        try {
          self->ProgressAndArm();
          self->Deliver();
        } catch (...) {
          // onCompletions does not throw; a failure here must not take the process down.
        }
        std::lock_guard<std::mutex> lock(self->mutex_);
        self->rearmed_ = true;
        self->cv_.notify_all();
      });
      if (queued != napi_ok) return;
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return rearmed_ || stopping_; });
      if (stopping_) return;
    }
  }

  // Main thread: runs UCX until it has nothing to do and the fd is armed for the next event. When
  // arming keeps failing (UCX has work it cannot finish alone: a peer worker on this same thread must
  // run first), it gives the event loop back and tries again on its next turn instead of spinning.
  void ProgressAndArm() {
    if (worker_ == nullptr) return;
    for (int attempt = 0; attempt < kArmAttempts; attempt++) {
      while (ucp_worker_progress(worker_) != 0) {
      }
      if (ucp_worker_arm(worker_) != UCS_ERR_BUSY) return;
    }
    if (!retryQueued_) {
      retryQueued_ = true;
      wake_.NonBlockingCall(this, [](Napi::Env, Napi::Function, UcxWorker* self) {
        self->retryQueued_ = false;
        try {
          self->ProgressAndArm();
          self->Deliver();
        } catch (...) {
          // As in Wait(): never take the process down from here.
        }
      });
    }
  }

  // Main thread: tells JavaScript the gets that completed since the last call.
  void Deliver() {
    if (completedIds_.empty()) return;
    Napi::Env env = Env();
    Napi::HandleScope scope(env);
    Napi::Array ids = Napi::Array::New(env, completedIds_.size());
    Napi::Array errors = Napi::Array::New(env, completedIds_.size());
    for (size_t i = 0; i < completedIds_.size(); i++) {
      ids.Set(uint32_t(i), Napi::Number::New(env, completedIds_[i]));
      errors.Set(uint32_t(i), Napi::String::New(env, completedErrors_[i]));
    }
    completedIds_.clear();
    completedErrors_.clear();
    onCompletions_.Call({ids, errors});
  }

  static void OnGetDone(void* request, ucs_status_t status, void* user) {
    auto* get = static_cast<GetRequest*>(user);
    get->worker->Settle(get, status);
    ucp_request_free(request);
  }

  // One of a get's UCX requests ended (or, UCS_OK, its starting did): the get completes when all have, with
  // the first error any of them had.
  void Settle(GetRequest* get, ucs_status_t status) {
    if (status != UCS_OK && get->status == UCS_OK) get->status = status;
    if (--get->outstanding > 0) return;
    Complete(get->id, get->status);
    delete get;
  }

  void Complete(double id, ucs_status_t status) {
    completedIds_.push_back(id);
    completedErrors_.push_back(status == UCS_OK ? "" : StatusText(status));
  }

  static void OnEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
    static_cast<Endpoint*>(arg)->failure = status;
  }

  void Alive() const {
    if (worker_ == nullptr) throw NativeError("ERR_UCX", "the UCX worker is closed");
  }

  Endpoint& EndpointOf(Napi::Value value) {
    Alive();
    auto it = endpoints_.find(uint32_t(value.As<Napi::Number>().Uint32Value()));
    if (it == endpoints_.end()) throw NativeError("ERR_ARG_INVALID", "no such UCX endpoint");
    return *it->second;
  }

  // address(): Buffer, this worker's UCP address (what a peer connects to).
  Napi::Value Address(const Napi::CallbackInfo& info) {
    Alive();
    ucp_address_t* address = nullptr;
    size_t length = 0;
    Check(ucp_worker_get_address(worker_, &address, &length), "ucp_worker_get_address");
    Napi::Buffer<uint8_t> copy =
        Napi::Buffer<uint8_t>::Copy(info.Env(), reinterpret_cast<uint8_t*>(address), length);
    ucp_worker_release_address(worker_, address);
    return copy;
  }

  // connect(address: Buffer): { id, peerFailure }. With peer error handling a broken peer fails its gets
  // (peerFailure true); transports that cannot detect a dead peer (shared memory in UCX 1.13) connect
  // without it (peerFailure false): the caller then bounds its gets and closes the endpoint itself.
  Napi::Value Connect(const Napi::CallbackInfo& info) {
    Alive();
    if (!info[0].IsBuffer()) throw NativeError("ERR_ARG_INVALID", "the peer's address must be a Buffer");
    auto endpoint = std::make_unique<Endpoint>();
    ucp_ep_params_t params = {};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(info[0].As<Napi::Buffer<uint8_t>>().Data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &UcxWorker::OnEndpointError;
    params.err_handler.arg = endpoint.get();
    bool peerFailure = true;
    // UCX logs an ERROR when no transport handles peer failure; that case is retried below, so it is
    // not an error here: the first attempt runs with UCX's log level at fatal.
    char level[32] = "";
    bool quiet = ucs_global_opts_get_value("LOG_LEVEL", level, sizeof(level)) == UCS_OK;
    if (quiet) ucs_global_opts_set_value("LOG_LEVEL", "fatal");
    ucs_status_t status = ucp_ep_create(worker_, &params, &endpoint->ep);
    if (quiet) ucs_global_opts_set_value("LOG_LEVEL", level);
    if (status == UCS_ERR_UNREACHABLE) {
      params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
      peerFailure = false;
      status = ucp_ep_create(worker_, &params, &endpoint->ep);
    }
    Check(status, "ucp_ep_create");
    endpoint->peerFailure = peerFailure;
    uint32_t id = nextEndpoint_++;
    endpoints_.emplace(id, std::move(endpoint));
    ProgressAndArm();
    Napi::Env env = info.Env();
    Napi::Object result = Napi::Object::New(env);
    result.Set("id", Napi::Number::New(env, id));
    result.Set("peerFailure", Napi::Boolean::New(env, peerFailure));
    return result;
  }

  // endpointInfo(ep): UCX's description of the endpoint's lanes (which transports carry its bytes).
  Napi::Value EndpointInfo(const Napi::CallbackInfo& info) {
    Endpoint& endpoint = EndpointOf(info[0]);
    char* text = nullptr;
    size_t length = 0;
    FILE* stream = open_memstream(&text, &length);
    if (stream == nullptr) throw NativeError("ERR_UCX", "open_memstream failed");
    ucp_ep_print_info(endpoint.ep, stream);
    fclose(stream);
    std::string result(text, length);
    free(text);
    return Napi::String::New(info.Env(), result);
  }

  // endpointFailure(ep): "" while healthy, else the UCX status that broke it.
  Napi::Value EndpointFailure(const Napi::CallbackInfo& info) {
    Endpoint& endpoint = EndpointOf(info[0]);
    return Napi::String::New(info.Env(), endpoint.failure == UCS_OK ? "" : StatusText(endpoint.failure));
  }

  // With peer error handling: a forced close, which completes locally and cancels the gets in flight (told
  // with an error). Without (UCX allows no forced close then): a flushing close left to finish on its own
  // (it never does when the peer is dead); gets in flight stay with UCX until the worker is destroyed.
  void CloseEndpointNow(Endpoint& endpoint) {
    if (endpoint.ep == nullptr) return;
    ucp_request_param_t param = {};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = endpoint.peerFailure ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t request = ucp_ep_close_nbx(endpoint.ep, &param);
    endpoint.ep = nullptr;
    if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
    if (!endpoint.peerFailure) {
      ucp_request_free(request);  // the close goes on without us
      return;
    }
    while (ucp_request_check_status(request) == UCS_INPROGRESS) ucp_worker_progress(worker_);
    ucp_request_free(request);
  }

  // closeEndpoint(ep): closes it (see CloseEndpointNow).
  Napi::Value CloseEndpoint(const Napi::CallbackInfo& info) {
    Endpoint& endpoint = EndpointOf(info[0]);
    CloseEndpointNow(endpoint);
    for (auto it = rkeys_.begin(); it != rkeys_.end();) {
      if (it->second.first == &endpoint) {
        ucp_rkey_destroy(it->second.second);
        it = rkeys_.erase(it);
      } else {
        ++it;
      }
    }
    endpoints_.erase(uint32_t(info[0].As<Napi::Number>().Uint32Value()));
    ProgressAndArm();
    Deliver();
    return info.Env().Undefined();
  }

  // map(region, offset, length): { id, rkey: Buffer, address: bigint } — the range readable by peers holding
  // rkey.
  Napi::Value Map(const Napi::CallbackInfo& info) {
    Alive();
    std::shared_ptr<HostRegion> region = NativeRegion::From(info[0]);
    size_t offset = ToSize(info[1], "offset");
    size_t length = ToSize(info[2], "length");
    if (length == 0) throw NativeError("ERR_ARG_INVALID", "a mapped range must not be empty");
    uint8_t* address = region->Span(offset, length);
    ucp_mem_map_params_t params = {};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address = address;
    params.length = length;
    MappedRange mapped;
    mapped.region = region;
    Check(ucp_mem_map(context_, &params, &mapped.memh), "ucp_mem_map");
    void* packed = nullptr;
    size_t packedLength = 0;
    ucs_status_t status = ucp_rkey_pack(context_, mapped.memh, &packed, &packedLength);
    if (status != UCS_OK) {
      ucp_mem_unmap(context_, mapped.memh);
      Check(status, "ucp_rkey_pack");
    }
    Napi::Env env = info.Env();
    Napi::Buffer<uint8_t> rkey =
        Napi::Buffer<uint8_t>::Copy(env, static_cast<uint8_t*>(packed), packedLength);
    ucp_rkey_buffer_release(packed);
    uint32_t id = nextMapping_++;
    mappings_.emplace(id, std::move(mapped));
    Napi::Object result = Napi::Object::New(env);
    result.Set("id", Napi::Number::New(env, id));
    result.Set("rkey", rkey);
    result.Set("address", Napi::BigInt::New(env, uint64_t(reinterpret_cast<uintptr_t>(address))));
    return result;
  }

  // unmap(id): the range is no longer readable; peers' rkeys for it are dead.
  Napi::Value Unmap(const Napi::CallbackInfo& info) {
    Alive();
    auto it = mappings_.find(info[0].As<Napi::Number>().Uint32Value());
    if (it == mappings_.end()) throw NativeError("ERR_ARG_INVALID", "no such UCX mapping");
    ucp_mem_unmap(context_, it->second.memh);
    mappings_.erase(it);
    return info.Env().Undefined();
  }

  // unpackRkey(ep, rkey: Buffer): rkey id, usable for gets on that endpoint until destroyRkey or its close.
  Napi::Value UnpackRkey(const Napi::CallbackInfo& info) {
    Endpoint& endpoint = EndpointOf(info[0]);
    if (!info[1].IsBuffer()) throw NativeError("ERR_ARG_INVALID", "the rkey must be a Buffer");
    ucp_rkey_h rkey = nullptr;
    Check(ucp_ep_rkey_unpack(endpoint.ep, info[1].As<Napi::Buffer<uint8_t>>().Data(), &rkey),
          "ucp_ep_rkey_unpack");
    uint32_t id = nextRkey_++;
    rkeys_.emplace(id, std::make_pair(&endpoint, rkey));
    return Napi::Number::New(info.Env(), id);
  }

  Napi::Value DestroyRkey(const Napi::CallbackInfo& info) {
    Alive();
    auto it = rkeys_.find(info[0].As<Napi::Number>().Uint32Value());
    if (it == rkeys_.end()) throw NativeError("ERR_ARG_INVALID", "no such UCX rkey");
    ucp_rkey_destroy(it->second.second);
    rkeys_.erase(it);
    return info.Env().Undefined();
  }

  // get(requestId, ep, rkeyId, remoteAddress: bigint, region, offset, length[, runs: Float64Array]): starts a
  // one-sided read into region[offset, offset + length) of `length` bytes at the peer's `remoteAddress`, or,
  // with `runs` (pairs: offset from remoteAddress, bytes; their bytes add up to `length`), of those runs one
  // after another (a slice gathered from a tensor: one UCX request per run, one completion for all). Its
  // completion is told through onCompletions with requestId (also when it completes at once). After an error
  // starting a run, no further run is started; the get fails once those started have ended.
  Napi::Value Get(const Napi::CallbackInfo& info) {
    double id = info[0].As<Napi::Number>().DoubleValue();
    Endpoint& endpoint = EndpointOf(info[1]);
    auto rkey = rkeys_.find(info[2].As<Napi::Number>().Uint32Value());
    if (rkey == rkeys_.end() || rkey->second.first != &endpoint)
      throw NativeError("ERR_ARG_INVALID", "no such UCX rkey on this endpoint");
    bool lossless = false;
    uint64_t remote = info[3].As<Napi::BigInt>().Uint64Value(&lossless);
    std::shared_ptr<HostRegion> region = NativeRegion::From(info[4]);
    size_t offset = ToSize(info[5], "offset");
    size_t length = ToSize(info[6], "length");
    uint8_t* destination = region->Span(offset, length);
    std::vector<std::pair<uint64_t, size_t>> runs;
    if (info.Length() > 7 && !info[7].IsUndefined()) {
      if (!info[7].IsTypedArray() || info[7].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array)
        throw NativeError("ERR_ARG_INVALID", "UCX get runs must be a Float64Array of (offset, bytes) pairs");
      Napi::Float64Array pairs = info[7].As<Napi::Float64Array>();
      if (pairs.ElementLength() % 2 != 0 || pairs.ElementLength() == 0)
        throw NativeError("ERR_ARG_INVALID",
                          "UCX get runs must be a non-empty list of (offset, bytes) pairs");
      size_t total = 0;
      for (size_t i = 0; i < pairs.ElementLength(); i += 2) {
        double at = pairs[i], bytes = pairs[i + 1];
        if (!(at >= 0 && at <= 9007199254740991.0 && at == double(uint64_t(at))) ||
            !(bytes >= 1 && bytes == double(size_t(bytes))))
          throw NativeError("ERR_ARG_INVALID", "UCX get run " + std::to_string(i / 2) +
                                                   " is not a whole offset >= 0 and byte count >= 1");
        runs.emplace_back(uint64_t(at), size_t(bytes));
        total += size_t(bytes);
      }
      if (total != length)
        throw NativeError("ERR_ARG_INVALID", "UCX get runs add up to " + std::to_string(total) +
                                                 " bytes, the destination has " + std::to_string(length));
    } else {
      runs.emplace_back(0, length);
    }
    if (endpoint.failure != UCS_OK) {
      Complete(id, endpoint.failure);
    } else {
      auto* get = new GetRequest{this, id, region, 1, UCS_OK};
      ucp_request_param_t param = {};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      param.cb.send = &UcxWorker::OnGetDone;
      param.user_data = get;
      uint8_t* into = destination;
      for (const auto& run : runs) {
        ucs_status_ptr_t request =
            ucp_get_nbx(endpoint.ep, into, run.second, remote + run.first, rkey->second.second, &param);
        into += run.second;
        if (request == nullptr) continue;
        if (UCS_PTR_IS_ERR(request)) {
          get->status = UCS_PTR_STATUS(request);
          break;
        }
        get->outstanding++;
      }
      Settle(get, UCS_OK);  // the starting's own count
    }
    ProgressAndArm();
    Deliver();
    return info.Env().Undefined();
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    Shutdown(true);
    return info.Env().Undefined();
  }

  void Shutdown(bool tell) {
    if (worker_ == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      cv_.notify_all();
    }
    uint64_t one = 1;
    if (write(stop_, &one, sizeof(one)) < 0) {
      // The waiter also stops on stopping_ at its next wake-up.
    }
    if (waiter_.joinable()) waiter_.join();
    wake_.Abort();  // a progress call still queued is dropped, not run on a closed worker
    for (auto& [id, rkey] : rkeys_) ucp_rkey_destroy(rkey.second);
    rkeys_.clear();
    for (auto& [id, endpoint] : endpoints_) CloseEndpointNow(*endpoint);
    endpoints_.clear();
    for (auto& [id, mapped] : mappings_) ucp_mem_unmap(context_, mapped.memh);
    mappings_.clear();
    while (ucp_worker_progress(worker_) != 0) {
    }
    DestroyWorker();
    close(epoll_);
    close(stop_);
    // Gets that completed while closing (with errors) are still told, when JavaScript can be called.
    if (tell && !completedIds_.empty()) Deliver();
  }

  void DestroyWorker() {
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    worker_ = nullptr;
    if (context_ != nullptr) ucp_cleanup(context_);
    context_ = nullptr;
  }

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int epoll_ = -1;
  int stop_ = -1;
  std::thread waiter_;
  Napi::ThreadSafeFunction wake_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool rearmed_ = true;
  // A retry of ProgressAndArm is queued on the event loop (main thread only).
  bool retryQueued_ = false;
  bool stopping_ = false;
  Napi::FunctionReference onCompletions_;
  std::vector<double> completedIds_;
  std::vector<std::string> completedErrors_;
  std::unordered_map<uint32_t, std::unique_ptr<Endpoint>> endpoints_;
  std::unordered_map<uint32_t, MappedRange> mappings_;
  std::unordered_map<uint32_t, std::pair<Endpoint*, ucp_rkey_h>> rkeys_;
  uint32_t nextEndpoint_ = 1;
  uint32_t nextMapping_ = 1;
  uint32_t nextRkey_ = 1;
};

}  // namespace

void RegisterUcx(Napi::Env env, Napi::Object exports) {
  exports.Set("ucxInfo", Napi::Function::New(env, UcxInfoJs, "ucxInfo"));
  exports.Set("UcxWorker", UcxWorker::DefineClass(env));
}

#else

namespace {

Napi::Value UcxInfoJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object result = Napi::Object::New(env);
  result.Set("compiled", false);
  result.Set("version", "");
  result.Set("transports", Napi::Array::New(env));
  return result;
}

}  // namespace

void RegisterUcx(Napi::Env env, Napi::Object exports) {
  exports.Set("ucxInfo", Napi::Function::New(env, UcxInfoJs, "ucxInfo"));
}

#endif

}  // namespace agentd
