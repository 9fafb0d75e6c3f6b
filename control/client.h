// control/client.h: the client side of the control API (sb-ctl, sb-bench,
// tests). One DEALER per node it talks to, CURVE-authenticated with the
// client's keypair when the cluster uses CURVE. Requests are pipelined:
// send() never waits for replies; recv() returns the next reply from any
// node. call() is the synchronous convenience.
//
// Thread safety: one thread per Client.
#pragma once

#include <cstdint>
#include <map>
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

  // Sends env to `node` (sets version; corr must be set by the caller),
  // waiting up to wait_ms for a connection to it. The sockets set
  // ZMQ_IMMEDIATE: nothing is queued for a node that is not connected
  // (down, not started yet, or its connection was lost), so a request the
  // caller gave up on is never delivered when the node comes (back) later.
  // kUnavailable: no connection within wait_ms, nothing was sent.
  Status send(uint32_t node, pb::Envelope& env, int wait_ms = 5000);
  // Waits up to timeout_ms for the next reply; *from = the node it came from.
  // kUnavailable on timeout, kCorrupt/kInvalidArgument for a bad reply.
  Status recv(pb::Envelope* out, uint32_t* from, int timeout_ms);
  // send + wait for the reply with the same corr (other replies are dropped).
  Result<pb::Envelope> call(uint32_t node, pb::Envelope env, int timeout_ms);

  // ---- weights of `node: choose` (control/proto WeightsRequest) ----
  struct Weights {
    uint64_t version = 0;                               // 0: the configuration's
    std::vector<std::pair<uint32_t, double>> weights;   // (node id, weight), every member
    std::vector<uint32_t> acked;    // set_weights: members that adopted this version
    std::vector<uint32_t> missing;  // set_weights: live members that did not confirm in time
                                    // (they adopt it from the coordinator's heartbeats)
  };
  // Changes the weights cluster-wide through node `via` (any member): the
  // members listed get the given weight, the others keep theirs. Only
  // sessions added afterwards follow the new weights; no session moves.
  // OK once the change is committed (a new version, persisted by the
  // coordinator): `missing` lists live members that had not confirmed it
  // yet. Errors: kInvalidArgument (unknown node, bad weight, every weight
  // 0), kUnavailable (the coordinator, the owner of partition 0, is down or
  // did not answer within timeout_ms: nothing changed or not known).
  Result<Weights> set_weights(const std::vector<std::pair<uint32_t, double>>& weights, uint32_t via,
                              int timeout_ms = 10000);
  // The weights node `node` uses for new sessions now.
  Result<Weights> get_weights(uint32_t node, int timeout_ms = 5000);

  // Every counter of node's StatsReply (name -> value); kUnavailable when
  // it did not answer within timeout_ms.
  Result<std::map<std::string, uint64_t>> stats(uint32_t node, int timeout_ms = 5000);

  uint32_t owner_of(const FlowKey& k) const;
  const rib::ClusterSpec& spec() const { return spec_; }
  uint64_t next_corr() { return ++corr_; }

 private:
  Client() = default;
  rib::ClusterSpec spec_;
  ValidationContext vctx_;
  zmq::context_t ctx_{1};
  std::vector<std::unique_ptr<zmq::socket_t>> sock_;  // by node id
  std::vector<int> sndtimeo_;                          // by node id: its socket's ZMQ_SNDTIMEO
  std::vector<zmq::pollitem_t> items_;
  std::vector<uint32_t> item_node_;
  uint64_t corr_ = 0;
};

// One counter of node's stats (tests, scripts): its value, 0 when the reply
// does not list it, UINT64_MAX when the node did not answer within 5 s.
uint64_t counter(Client& c, uint32_t node, const std::string& name);

}  // namespace sb::control
