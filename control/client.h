// control/client.h: the client side of the control API (sb-ctl, sb-bench,
// tests). One DEALER per node it talks to, CURVE-authenticated with the
// client's keypair when the cluster uses CURVE. Requests are pipelined:
// send() never waits for replies; recv() returns the next reply from any
// node. call() is the synchronous convenience.
//
// Thread safety: one thread per Client.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "control/config.h"
#include "control/validate.h"

namespace sb::control {

class Client {
 public:
  // nodes: member ids to connect to (empty: every member).
  static Result<std::unique_ptr<Client>> connect(const rib::ClusterSpec& spec, const KeyPair* keys,
                                                 std::vector<uint32_t> nodes = {});
  ~Client();

  // Sends env to `node` (sets version; corr must be set by the caller).
  Status send(uint32_t node, pb::Envelope& env);
  // Waits up to timeout_ms for the next reply; *from = the node it came from.
  // kUnavailable on timeout, kCorrupt/kInvalidArgument for a bad reply.
  Status recv(pb::Envelope* out, uint32_t* from, int timeout_ms);
  // send + wait for the reply with the same corr (other replies are dropped).
  Result<pb::Envelope> call(uint32_t node, pb::Envelope env, int timeout_ms);

  uint32_t owner_of(const FlowKey& k) const;
  const rib::ClusterSpec& spec() const { return spec_; }
  uint64_t next_corr() { return ++corr_; }

 private:
  Client() = default;
  rib::ClusterSpec spec_;
  ValidationContext vctx_;
  zmq::context_t ctx_{1};
  std::vector<std::unique_ptr<zmq::socket_t>> sock_;  // by node id
  std::vector<zmq::pollitem_t> items_;
  std::vector<uint32_t> item_node_;
  uint64_t corr_ = 0;
};

}  // namespace sb::control
