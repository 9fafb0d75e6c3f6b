#include "control/client.h"

#include <algorithm>

#include "core/hash.h"

namespace sb::control {

Client::~Client() {
  for (auto& s : sock_)
    if (s) s->close();
}

Result<std::unique_ptr<Client>> Client::connect(const rib::ClusterSpec& spec, const KeyPair* keys,
                                                std::vector<uint32_t> nodes) {
  SB_RETURN_IF_ERROR(spec.validate());
  if (spec.curve && keys == nullptr)
    return Status::InvalidArgument(
        "the cluster uses CURVE: a key file is needed (--key FILE: a client's or a member's keypair)");
  std::unique_ptr<Client> c(new Client());
  c->spec_ = spec;
  c->vctx_.partitions = spec.partitions;
  for (const auto& m : spec.members) c->vctx_.member_mask |= 1u << m.id;
  if (nodes.empty())
    for (const auto& m : spec.members) nodes.push_back(m.id);
  c->sock_.resize(rib::kMaxNodes);
  c->sndtimeo_.assign(rib::kMaxNodes, -1);
  try {
    for (uint32_t n : nodes) {
      const rib::Member* m = spec.member(n);
      if (!m) return Status::InvalidArgument("unknown node " + std::to_string(n));
      auto s = std::make_unique<zmq::socket_t>(c->ctx_, zmq::socket_type::dealer);
      s->set(zmq::sockopt::linger, 0);
      // Queue requests only on a completed connection: a request to a node
      // that is down must fail (send() waits a bounded time), not wait in
      // the pipe and run when the node comes back, after the caller has
      // reported the failure (and perhaps retried elsewhere).
      s->set(zmq::sockopt::immediate, true);
      s->set(zmq::sockopt::sndhwm, 100000);
      s->set(zmq::sockopt::rcvhwm, 100000);
      if (spec.curve) {
        s->set(zmq::sockopt::curve_serverkey, m->curve_public);
        s->set(zmq::sockopt::curve_publickey, keys->public_key);
        s->set(zmq::sockopt::curve_secretkey, keys->secret_key);
      }
      s->connect(m->control);
      c->items_.push_back({s->handle(), 0, ZMQ_POLLIN, 0});
      c->item_node_.push_back(n);
      c->sock_[n] = std::move(s);
    }
  } catch (const zmq::error_t& e) {
    return Status::Io(std::string("connect: ") + e.what());
  }
  return c;
}

uint32_t Client::owner_of(const FlowKey& k) const {
  return spec_.owner[partition_of(hash_key(k, spec_.hash_seed), spec_.log2_partitions())];
}

Status Client::send(uint32_t node, pb::Envelope& env, int wait_ms) {
  if (node >= sock_.size() || !sock_[node]) return Status::InvalidArgument("not connected to node " + std::to_string(node));
  env.set_version(kProtocolVersion);
  const std::string b = env.SerializeAsString();
  zmq::message_t m(b.data(), b.size());
  wait_ms = std::max(wait_ms, 0);
  try {
    // With ZMQ_IMMEDIATE a DEALER without a completed connection blocks the
    // send: bounded by ZMQ_SNDTIMEO (set only when it changes).
    if (sndtimeo_[node] != wait_ms) {
      sock_[node]->set(zmq::sockopt::sndtimeo, wait_ms);
      sndtimeo_[node] = wait_ms;
    }
    if (!sock_[node]->send(m, zmq::send_flags::none))
      return Status::Unavailable("node " + std::to_string(node) + " is not connected (down?): nothing sent within " +
                                 std::to_string(wait_ms) + " ms");
  } catch (const zmq::error_t& e) {
    return Status::Io(std::string("send: ") + e.what());
  }
  return Status::Ok();
}

Status Client::recv(pb::Envelope* out, uint32_t* from, int timeout_ms) {
  try {
    const int n = zmq::poll(items_.data(), items_.size(), std::chrono::milliseconds(timeout_ms));
    if (n <= 0) return Status::Unavailable("no reply within " + std::to_string(timeout_ms) + " ms");
    for (size_t i = 0; i < items_.size(); ++i) {
      if (!(items_[i].revents & ZMQ_POLLIN)) continue;
      zmq::message_t m;
      if (!sock_[item_node_[i]]->recv(m, zmq::recv_flags::dontwait)) continue;
      if (from) *from = item_node_[i];
      ValidationContext v = vctx_;
      return parse_envelope({static_cast<const uint8_t*>(m.data()), m.size()}, v, out);
    }
  } catch (const zmq::error_t& e) {
    return Status::Io(std::string("recv: ") + e.what());
  }
  return Status::Unavailable("no reply");
}

Result<pb::Envelope> Client::call(uint32_t node, pb::Envelope env, int timeout_ms) {
  const uint64_t corr = next_corr();
  env.set_corr(corr);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  if (Status st = send(node, env, timeout_ms); !st.ok()) {
    if (st.code() != StatusCode::kUnavailable) return st;
    return Status::Unavailable("node " + std::to_string(node) + " did not answer within " + std::to_string(timeout_ms) +
                               " ms (not connected: nothing was sent)");
  }
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return Status::Unavailable("node " + std::to_string(node) + " did not answer within " + std::to_string(timeout_ms) + " ms");
    pb::Envelope r;
    uint32_t from = 0;
    Status st = recv(&r, &from, int(left));
    if (st.code() == StatusCode::kUnavailable) continue;
    SB_RETURN_IF_ERROR(st);
    if (r.corr() == corr) return r;
  }
}

namespace {
Result<Client::Weights> weights_of(const Result<pb::Envelope>& r) {
  if (!r.ok()) return r.status();
  if (r.value().has_error()) return from_code(r.value().error().code(), r.value().error().text());
  if (!r.value().has_weights_reply()) return Status::Internal("unexpected reply to a weights request");
  const pb::WeightsReply& w = r.value().weights_reply();
  if (w.code() != pb::OK) return from_code(w.code(), w.text());
  Client::Weights out;
  out.version = w.version();
  for (const auto& x : w.weights()) out.weights.emplace_back(x.node(), x.weight());
  out.acked.assign(w.acked().begin(), w.acked().end());
  out.missing.assign(w.missing().begin(), w.missing().end());
  return out;
}
}  // namespace

Result<Client::Weights> Client::set_weights(const std::vector<std::pair<uint32_t, double>>& weights, uint32_t via,
                                            int timeout_ms) {
  pb::Envelope env;
  auto* w = env.mutable_weights_request();
  w->set_set(true);
  for (const auto& [node, weight] : weights) {
    auto* x = w->add_weights();
    x->set_node(node);
    x->set_weight(weight);
  }
  return weights_of(call(via, env, timeout_ms));
}

Result<std::map<std::string, uint64_t>> Client::stats(uint32_t node, int timeout_ms) {
  pb::Envelope req;
  req.mutable_stats_request();
  Result<pb::Envelope> r = call(node, req, timeout_ms);
  if (!r.ok()) return r.status();
  std::map<std::string, uint64_t> out;
  for (const auto& x : r.value().stats().counters()) out[x.name()] = x.value();
  return out;
}

Result<Client::Weights> Client::get_weights(uint32_t node, int timeout_ms) {
  pb::Envelope env;
  env.mutable_weights_request()->set_set(false);
  return weights_of(call(node, env, timeout_ms));
}

uint64_t counter(Client& c, uint32_t node, const std::string& name) {
  Result<std::map<std::string, uint64_t>> r = c.stats(node, 5000);
  if (!r.ok()) return UINT64_MAX;
  const auto it = r.value().find(name);
  return it == r.value().end() ? 0 : it->second;
}

}  // namespace sb::control
