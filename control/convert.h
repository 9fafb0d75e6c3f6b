// control/convert.h: sb.control.v1 messages <-> the rib/ message structs.
// REQUIRES: the protobuf side passed validate() (keys are 16 bytes, ids in
// range); conversions do no further checks. Pure functions.
#pragma once

#include "control/validate.h"
#include "rib/messages.h"

namespace sb::control {

rib::OpKind from_pb(pb::OpKind k);
pb::OpKind to_pb(rib::OpKind k);

void to_pb(const rib::FibEntry& e, pb::FibEntry* out);
rib::FibEntry from_pb(const pb::FibEntry& e);

void to_pb(const rib::FibBatch& b, pb::FibUpdate* out);
rib::FibBatch from_pb(const pb::FibUpdate& u);

void to_pb(const rib::FibAckMsg& a, pb::FibAck* out);
rib::FibAckMsg from_pb(const pb::FibAck& a);
void to_pb(const rib::TeidReportMsg& r, pb::TeidReport* out);
rib::TeidReportMsg from_pb(const pb::TeidReport& r);

void to_pb(const rib::StreamDelta& d, pb::GptDelta* out);
rib::StreamDelta from_pb(const pb::GptDelta& d);

// A snapshot chunk; `owner` is the sender (the partition's owner).
void to_pb(const rib::SnapshotChunkMsg& c, uint32_t owner, pb::SnapshotChunk* out);
rib::SnapshotChunkMsg chunk_from_pb(const pb::SnapshotChunk& s);

void to_pb(const rib::SessionRec& r, pb::Session* out);
rib::ClientOp from_pb(const pb::SessionOp& op);
void to_pb(const rib::OpReply& r, pb::OpResult* out);

}  // namespace sb::control
