// libFuzzer target for what another cluster member (or a client) can send
// to a node's control agent (control/agent.cc). Each input gets a real
// agent, made by Agent::create() as sb-node makes it (its ZeroMQ sockets
// bound to inproc endpoints of its own context, its RIB owner with the WAL
// in a temporary directory, a SetSep or Ludo GPT replica, a cuckoo or
// Othello FIB); every record's frame goes to Agent::inject() on the socket
// the record names, then Agent::tick() runs the rest of the loop pass on a
// virtual clock (AgentOptions::clock). Nothing reads what the agent sends:
// its replies to the fuzzer's routing ids are unroutable, its DEALER sends
// wait in outboxes and expire, as with peers that are down. Input format:
// control/control_fuzz.h.
//
// Checked after every record (abort: libFuzzer reports a crash):
//   - Agent::check_invariants() (control/agent.h: FIB and session table,
//     GPT answers in range, the owner's sessions in its own GPT replica,
//     waiting requests and forwarded ops, held FIB acks, counters only
//     grow);
// and on every frame the agent sends (AgentOptions::on_send):
//   - it passes the receivers' validation (Agent::check_frame);
//   - a ROUTER connection (one per record) gets at most one reply.
//
//   make fuzz [FUZZ_SECONDS=60]     clang -fsanitize=fuzzer,address,undefined
// The committed corpus (control/fuzz_corpus/) is replayed under ASan+UBSan
// by ctest (control_fuzz_replay_test.cc).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "control/agent.h"
#include "control/control_fuzz.h"
#include "control/validate.h"
#include "core/checksum.h"
#include "gpt/delta.h"

namespace {

using namespace sb;
using namespace sb::control;
namespace fz = sb::control::fuzz;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "control_fuzz: %s\n", what.c_str());
  std::abort();
}

std::string data_dir() {
  static const std::string d = [] {
    const char* t = std::getenv("TMPDIR");
    std::string base = t && *t ? t : (std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp");
    return base + "/sb-control-fuzz." + std::to_string(::getpid());
  }();
  return d;
}

// CURVE keys of the fuzz cluster's members and of its client "fuzz", made
// once per process.
const std::vector<KeyPair>& keys() {
  static const std::vector<KeyPair> k = [] {
    std::vector<KeyPair> v;
    for (uint32_t i = 0; i <= fz::kMembers; ++i) {
      Result<KeyPair> kp = generate_keypair();
      if (!kp.ok()) fail("keys: " + kp.status().to_string());
      v.push_back(kp.value());
    }
    return v;
  }();
  return k;
}

// payload_len and checksum made right for the bytes as they are (what a
// hostile peer does to get its bytes past the checksum).
void reseal_delta(uint8_t* p, size_t n, bool set_len) {
  if (n < gpt::kDeltaHeaderBytes) return;
  if (set_len) gpt::put_u32(p + 12, uint32_t(n - gpt::kDeltaHeaderBytes));
  if (gpt::get_u32(p + 12) != n - gpt::kDeltaHeaderBytes) return;
  gpt::delta_stamp({p, n}, gpt::get_u32(p + 20), gpt::get_u64(p + 24));
}
void reseal_snap(std::string* s) {
  if (s->size() < 64) return;
  auto* p = reinterpret_cast<uint8_t*>(s->data());
  gpt::put_u64(p + 40, s->size() - 64);
  gpt::put_u64(p + 56, checksum64(p + 64, s->size() - 64, checksum64(p, 56)));
}
// kReseal: the checksums of a frame's deltas and of a one-chunk snapshot's
// GPT part made right (sizes unchanged). A frame protobuf cannot parse, or
// with nothing to reseal, stays as it is.
void reseal(std::string* frame) {
  pb::Envelope env;
  if (!env.ParseFromString(*frame)) return;
  if (env.has_delta_batch()) {
    auto* b = env.mutable_delta_batch();
    for (auto& d : *b->mutable_deltas()) {
      std::string* s = d.mutable_delta();
      reseal_delta(reinterpret_cast<uint8_t*>(s->data()), s->size(), true);
    }
    std::string* pk = b->mutable_packed();
    size_t off = 0;
    while (pk->size() - off >= gpt::kDeltaHeaderBytes) {
      uint8_t* p = reinterpret_cast<uint8_t*>(pk->data()) + off;
      const size_t len = gpt::kDeltaHeaderBytes + size_t(gpt::get_u32(p + 12));
      if (pk->size() - off < len) break;
      reseal_delta(p, len, false);
      off += len;
    }
  } else if (env.has_snapshot_chunk() && env.snapshot_chunk().count() == 1) {
    reseal_snap(env.mutable_snapshot_chunk()->mutable_gpt());
  } else {
    return;
  }
  *frame = env.SerializeAsString();
}

uint64_t g_now_us = 0;  // the agents' clock (AgentOptions::clock)

struct Run {
  uint8_t config;
  uint32_t self;
  std::vector<uint32_t> peers;
  std::unique_ptr<Agent> agent;
  std::unordered_map<std::string, uint32_t> replies;  // ROUTER routing id -> replies sent to it

  explicit Run(uint8_t cfg) : config(cfg), self(fz::self_of(cfg)) {
    std::error_code ec;
    std::filesystem::remove_all(data_dir(), ec);
    std::filesystem::create_directories(data_dir(), ec);
    AgentOptions o;
    o.config.cluster = fz::spec(cfg);
    rib::ClusterSpec& spec = o.config.cluster;
    for (const auto& m : spec.members)
      if (m.id != self) peers.push_back(m.id);
    if (cfg & fz::kCurve) {
      spec.curve = true;
      for (auto& m : spec.members) m.curve_public = keys()[m.id].public_key;
      spec.clients.push_back({"fuzz", keys()[fz::kMembers].public_key});
      o.keys = keys()[self];
    }
    o.config.node.id = self;
    o.config.node.data_dir = data_dir();
    o.config.node.fsync = FsyncPolicy::kNone;
    o.config.node.fib_capacity = 1024;
    o.config.node.snapshot_every = 64;  // compaction in reach of an input
    o.config.node.snapshot_chunk_bytes = fz::kChunkBytes;
    o.config.node.dp.fib_othello = cfg & fz::kOthello;
    o.fib_timeout_ms = (cfg & fz::kShortFibTimeout) ? 10 : 3000;
    // The default window reserves 2^20 ids at open (tens of MB per input
    // under ASan); an input never holds more ids than this.
    o.dedup_window = 1 << 12;
    const bool verbose = std::getenv("SB_CONTROL_FUZZ_VERBOSE") != nullptr;
    o.log = [verbose](const std::string& s) {
      if (verbose) std::fprintf(stderr, "agent: %s\n", s.c_str());
    };
    g_now_us = 1000000;
    o.clock = [] { return g_now_us; };
    o.on_send = [this](FrameSocket on, uint32_t, const std::string& routing, const std::string& frame) {
      const Status st = agent->check_frame(reinterpret_cast<const uint8_t*>(frame.data()), frame.size());
      if (!st.ok()) fail("the agent sends a message its receivers refuse: " + st.to_string());
      if (on == FrameSocket::kRouter && ++replies[routing] > 1)
        fail("a second reply to the ROUTER connection " + routing);
    };
    Result<std::unique_ptr<Agent>> a = Agent::create(o);
    if (!a.ok()) fail("Agent::create: " + a.status().to_string());
    agent = std::move(a.value());
  }
  ~Run() {
    agent.reset();
    std::error_code ec;
    std::filesystem::remove_all(data_dir(), ec);
  }

  void tick() {
    const Status t = agent->tick(g_now_us);
    if (!t.ok()) fail("Agent::tick: " + t.to_string());
    const Status st = agent->check_invariants();
    if (!st.ok()) fail(st.to_string());
  }
  void inject(FrameSocket on, uint32_t peer, const std::string& routing, const std::string& user,
              const std::string& frame) {
    const Status st = agent->inject(on, peer, routing, user, reinterpret_cast<const uint8_t*>(frame.data()), frame.size());
    if (!st.ok()) fail("Agent::inject: " + st.to_string());
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (1u << 20)) return 0;
  Run r(data[0]);
  r.tick();
  size_t off = 1;
  for (uint32_t record = 0; off < size; ++record) {
    const uint8_t op = data[off++];
    size_t len = 0;
    if (off < size) len = data[off++];
    if (off < size) len |= size_t(data[off++]) << 8;
    len = std::min(len, size - off);
    // An exact-size copy: a one-byte over-read is caught by ASan.
    std::string bytes(reinterpret_cast<const char*>(data + off), len);
    off += len;
    if ((data[0] & fz::kReseal) && (op & 3) != fz::kTick) reseal(&bytes);
    const uint32_t arg = op >> 2;
    const uint32_t peer = r.peers[arg % r.peers.size()];
    switch (op & 3) {
      case fz::kRouter: {
        std::string user;
        if (data[0] & fz::kCurve) {
          switch (arg % 5) {
            case 0: break;
            case 1: user = "client:fuzz"; break;
            case 2: user = "member:" + std::to_string(r.peers[0]); break;
            case 3: user = "member:" + std::to_string(r.peers[1]); break;
            default: user = "member:9"; break;
          }
        }
        r.inject(FrameSocket::kRouter, 0, "fz" + std::to_string(record), user, bytes);
        break;
      }
      case fz::kDealer: r.inject(FrameSocket::kDealer, peer, "", "", bytes); break;
      case fz::kSub: r.inject(FrameSocket::kSub, peer, "", "", bytes); break;
      default: {
        uint32_t ms = 100;
        if (bytes.size() >= 4) ms = std::min<uint32_t>(gpt::get_u32(reinterpret_cast<const uint8_t*>(bytes.data())), 60000);
        g_now_us += uint64_t(ms) * 1000;
        break;
      }
    }
    g_now_us += 1000;  // every record takes a millisecond
    r.tick();
  }
  if (std::getenv("SB_CONTROL_FUZZ_VERBOSE")) {  // what an input reached (seed checks)
    g_now_us += 1000000;  // the counters are published once a second
    r.tick();
    for (const auto& [name, v] : r.agent->counters())
      if (v != 0) std::fprintf(stderr, "%s=%llu ", name.c_str(), (unsigned long long)v);
    std::fprintf(stderr, "\n");
  }
  return 0;
}
