// rib/messages.h: the transport-neutral messages between RIB owners, nodes
// and clients. control/ maps them to and from protobuf (sb.control.v1); the
// in-process tests pass them directly. Plain value types.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/flow_key.h"
#include "core/status.h"

namespace sb::rib {

enum class OpKind : uint8_t { kAdd = 1, kModify = 2, kMove = 3, kDelete = 4, kShow = 5 };
const char* op_kind_name(OpKind k);

struct SessionSpec {
  enum Field : uint8_t { kTeidDl = 1, kEnbIp = 2, kBearer = 4, kAllFields = 7 };
  FlowKey key{};
  uint32_t node = 0;   // handling node (ignored when choose)
  bool choose = false;
  uint32_t teid_dl = 0;
  uint32_t enb_ip = 0;
  uint8_t bearer = 0;
  uint8_t fields = kAllFields;  // which of teid_dl, enb_ip, bearer a MODIFY sets
};

// A session record as the owner holds it.
struct SessionRec {
  FlowKey key{};
  uint32_t node = 0;
  uint32_t teid_dl = 0;
  uint32_t enb_ip = 0;
  uint8_t bearer = 0;
  uint32_t teid_ul = 0;  // learnt from the handling node's FIB ack (0: not yet)
};

struct ClientOp {
  OpKind kind = OpKind::kAdd;
  uint64_t request_id = 0;
  SessionSpec s;
  uint64_t token = 0;   // opaque: who gets the reply (the transport's)
  uint64_t t0_us = 0;   // arrival time (latency accounting)
};

struct OpReply {
  uint64_t token = 0;
  uint64_t request_id = 0;
  Status status;
  SessionRec rec;         // the record after the op (SHOW: the record)
  bool full_record = false;  // the client wants the whole record (SHOW, failures)
  uint32_t partition = 0;
  uint32_t epoch = 0;     // stream position of the op's GPT change (0: none)
  uint64_t seq = 0;
  uint64_t weights_version = 0;  // choose adds: the code table version that picked the node
};

struct FibEntry {
  FlowKey key{};
  uint32_t handling_node = 0;
  uint32_t teid_dl = 0;
  uint32_t enb_ip = 0;
  uint8_t bearer = 0;
  // The teid_ul the handling node acked for this session, in entries sent
  // to that node (op batches of a modify, compensations, snapshots,
  // re-pushes): a restarted handler places the session at the same index
  // and generation (NodeState::install), so the eNodeB's uplink TEID stays
  // valid. 0: unknown, a new index (add, move), or another node's entry.
  uint32_t teid_ul = 0;
};

struct FibBatch {
  uint64_t batch_id = 0;
  uint32_t owner = 0;
  std::vector<FibEntry> install;  // insert or overwrite (idempotent)
  std::vector<FlowKey> remove;    // absent keys are fine
  // Reconcile (a restarted owner's re-push once the members resynced, a
  // re-push to a member back after it was down): after the installs, the
  // node removes every entry of these partitions that this batch did not
  // install (stale entries of moves whose removal the crash lost).
  std::vector<uint32_t> reconcile;
};

struct FibAckMsg {
  uint64_t batch_id = 0;
  uint32_t node = 0;
  std::vector<StatusCode> install_code;
  std::vector<uint32_t> teid_ul;  // per install (0 when not the handling node)
  std::vector<StatusCode> remove_code;
};

// A handling node's uplink TEIDs that its owner may not know: sessions the
// node installed from a snapshot (or at the end of its restore) under a
// teid_ul other than the one the snapshot entry named (rib/node_state.h,
// TEID REPORTS). Travels node -> owner on the same ordered channel as the
// FIB acks; the owner answers with a TeidReportAck of the same id.
struct TeidReportMsg {
  uint64_t report_id = 0;
  uint32_t node = 0;
  std::vector<FlowKey> keys;
  std::vector<uint32_t> teid_ul;  // one per key
};

// One GPT delta in its partition stream.
struct StreamDelta {
  uint32_t partition = 0;
  uint32_t sub_id = 0;
  uint32_t epoch = 0;
  uint64_t seq = 0;
  std::vector<uint8_t> bytes;  // gpt/delta.h bytes, stamped with (epoch, seq); header == labels
};

// The same without owning the bytes (the receive path: no copy per delta).
struct StreamDeltaView {
  uint32_t partition = 0;
  uint32_t sub_id = 0;
  uint32_t epoch = 0;
  uint64_t seq = 0;
  std::span<const uint8_t> bytes;
};

struct StreamPos {
  uint32_t epoch = 0;
  uint64_t seq = 0;
  friend bool operator==(const StreamPos&, const StreamPos&) = default;
  // Total order: a later epoch is newer whatever its seq.
  friend bool operator<(const StreamPos& a, const StreamPos& b) {
    return a.epoch != b.epoch ? a.epoch < b.epoch : a.seq < b.seq;
  }
  friend bool operator<=(const StreamPos& a, const StreamPos& b) { return !(b < a); }
};

struct SnapshotOut {
  uint32_t partition = 0;
  StreamPos pos;
  std::vector<uint8_t> gpt;      // serialize_partition bytes (empty: no GPT)
  std::vector<FibEntry> fib;     // entries for the requesting node
};

// One bounded piece of a snapshot (a whole one can exceed the transport's
// message size limit). Chunks of one snapshot share (partition, pos,
// request_id, count); index runs 0..count-1. Chunk i carries the next
// bytes of the GPT part and the next FIB entries, in order: concatenating
// the chunks gives back the SnapshotOut.
struct SnapshotChunkMsg {
  uint32_t partition = 0;
  StreamPos pos;
  uint64_t request_id = 0;  // the requester's id of this snapshot request
  uint32_t index = 0;
  uint32_t count = 0;
  std::vector<uint8_t> gpt;
  std::vector<FibEntry> fib;
};

}  // namespace sb::rib
