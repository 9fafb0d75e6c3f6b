// tools/gen/sessions.h: the session file sb-gen sends for and checks
// against, and the upstream TEID file of the sink.
//
// Session file (ARCHITECTURE.md "Shared definitions: Sessions"; what
// `sb-ctl session gen` writes and `sb-ctl session load` reads): read by the
// shared reader, rib/session_file.h, which defines the format (CSV with a
// header naming the nine columns, or JSONL parsed by a real JSON parser),
// the values and the error messages ("FILE:LINE: field: cause"). Session i
// is the i-th data row: the index the generator puts in its marker and the
// sink looks up.
//
// sb-gen stops at the first bad row, and on top of the reader rejects, with
// the file name and line number: duplicate 5-tuples (the sink could not
// tell which session a packet belongs to), ports on a protocol sb-gen
// has no L4 header for (anything but TCP and UDP must have ports 0), and
// SCTP (132) and UDP-Lite (136), which the gateway keys by ports but sb-gen
// has no header for.
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

// Parses one JSON object ({"k": "v", "k2": 12, "k3": [..], "k4": {..}})
// with nlohmann::json into key -> value text (strings unescaped; numbers,
// literals and nested arrays/objects as compact JSON text). Used by the
// report merge (send.json, sink.json); session files go through
// rib/session_file.h.
Status parse_json_object(const std::string& text, std::vector<std::pair<std::string, std::string>>* out);

// A number 0..max: decimal (leading zeros stay decimal) or 0x hex, never
// octal (rib::parse_number, the syntax of session files and sb-ctl).
Result<uint64_t> parse_uint(const std::string& s, uint64_t max);

}  // namespace sb::gen
