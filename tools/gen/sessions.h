// tools/gen/sessions.h: the session file sb-gen sends for and checks
// against, and the upstream TEID file of the sink.
//
// Session file (ARCHITECTURE.md "Shared definitions: Sessions"; what
// `sb-ctl session gen` writes and `sb-ctl session load` reads): CSV with the
// header `src_ip,dst_ip,src_port,dst_port,proto,node,teid_dl,enb_ip,bearer`
// (columns in any order; extra columns ignored) or JSONL objects with the
// same field names. Blank lines and lines starting with '#' are skipped.
// Numbers are decimal or 0x-hex; proto is a number or tcp/udp/icmp; node is
// a member id or `choose`. Session i is the i-th data line: the index the
// generator puts in its marker and the sink looks up.
//
// Rejected, with the file name and line number: missing or malformed
// fields, duplicate 5-tuples (the sink could not tell which session a
// packet belongs to), and ports on a protocol sb-gen has no L4 header for
// (anything but TCP and UDP must have ports 0).
//
// Upstream TEID file (sink --upstream-teids): lines
//   teid_ul,ue_ip,server_ip,ue_port,server_port,proto[,gw_ip]
// with an optional header line starting with `teid_ul`. gw_ip is the S1-U
// address of the node to send to (default: the sink's --gw-ip).
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "core/status.h"
#include "tools/gen/frame.h"

namespace sb::gen {

struct Session {
  Tuple t;                 // the downstream 5-tuple (src = Internet side, dst = UE)
  uint32_t teid_dl = 0;
  uint32_t enb_ip = 0;
  int32_t node = -1;       // -1: choose
  uint8_t bearer = 0;
};

// `name` labels error messages ("FILE:LINE: ...").
Status parse_sessions(std::istream& in, const std::string& name, std::vector<Session>* out);
Status load_sessions(const std::string& path, std::vector<Session>* out);

struct UpstreamFlow {
  uint32_t teid_ul = 0;
  Tuple t;                 // UE -> server
  uint32_t gw_ip = 0;      // 0: the default gateway address
};
Status parse_upstream_teids(std::istream& in, const std::string& name, std::vector<UpstreamFlow>* out);
Status load_upstream_teids(const std::string& path, std::vector<UpstreamFlow>* out);

// Parses one flat JSON object ({"k": "v", "k2": 12, "k3": [..], "k4": {..}})
// into key -> raw value text (strings unquoted; nested arrays/objects kept
// as their raw text). Used for JSONL sessions and for the report merge.
Status parse_json_object(const std::string& text, std::vector<std::pair<std::string, std::string>>* out);

// A number 0..max (decimal or 0x-hex).
Result<uint64_t> parse_uint(const std::string& s, uint64_t max);

}  // namespace sb::gen
