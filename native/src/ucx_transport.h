// UCX (UCP) one-sided transfers for the weight-transfer agent
// (agent/weights/PROTOCOL.md "RDMA (UCX)"): a worker per agent, endpoints to
// peers' workers, host memory mapped for remote reads, and RMA gets straight
// into host-pool memory. UCX picks the transport (RC/DC verbs on InfiniBand
// and RoCE, shared memory within a node, TCP where nothing else exists).
// Compiled only with AGENTD_WITH_UCX (binding.gyp, when pkg-config finds
// ucx); otherwise ucxInfo() says so and createUcxWorker throws ERR_UCX_UNAVAILABLE.
#pragma once

#include <napi.h>

namespace agentd {

void RegisterUcx(Napi::Env env, Napi::Object exports);

}  // namespace agentd
