// rib/session_file.h: the one reader (and writer) of session files, the
// input of `sb-ctl session load` and `sb-gen` (ARCHITECTURE.md "Shared
// definitions: Sessions"; `sb-ctl session gen` writes them).
//
// FORMAT. UTF-8 text, one record per line, `\n` or `\r\n` line ends, an
// optional UTF-8 byte order mark. Blank lines and lines whose first
// non-blank character is `#` (comments) are skipped in both formats. The
// first other line decides the format:
//
//   CSV    a header line naming the nine columns, in any order:
//            src_ip,dst_ip,src_port,dst_port,proto,node,teid_dl,enb_ip,bearer
//          then one row per line. Cells are trimmed of spaces and tabs; a
//          cell may be quoted ("...", "" for a quote inside). Every column
//          must be present exactly once and no other column is allowed:
//          a header that breaks this rule ends the read (fatal, line 1),
//          since no row of such a file could be trusted.
//   JSONL  one JSON object per line (RFC 8259, parsed by nlohmann::json's
//          SAX parser: standard escapes, \uXXXX and surrogate pairs, UTF-8
//          checked) with exactly the nine fields above. Nested values
//          (objects, arrays), unknown fields and repeated fields reject the
//          row.
//
// VALUES (the same text rules in both formats; JSON also takes numbers):
//   src_ip, dst_ip, enb_ip   dotted quad a.b.c.d (JSON: a string)
//   src_port, dst_port       0..65535
//   proto                    0..255 or tcp / udp / icmp
//   node                     a member id (0..31, and a member of the cluster
//                            when the caller says which ids are members) or
//                            `choose`
//   teid_dl                  0..2^32-1
//   bearer                   EPS bearer id 0..15
// A number is decimal digits or 0x followed by hex digits (never octal, no
// sign); in JSON it may be an integer literal or a string holding that
// text. Floats, negatives, booleans and null are rejected.
//
// ERRORS. A bad row is rejected alone and reading goes on (next() returns
// kRejected); the error names the class, the line, the field and the
// cause, as one message "NAME:LINE: FIELD: cause" ("NAME:LINE:COL: bad
// JSON: cause" for JSON syntax, COL = the byte column). Lines longer than
// max_line bytes are rejected without being buffered. Fatal errors (CSV
// header, not a session file at all, read error) end the read (kFatal).
//
// STREAMING. Constant memory whatever the file size: a 64 KiB read buffer
// plus one line of at most max_line bytes. No row is kept after next()
// returns it.
//
// Thread safety: one thread per reader.
#pragma once

#include <cstdint>
#include <istream>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "core/flow_key.h"
#include "core/status.h"

namespace sb::rib {

// One session of a file, in host order.
struct SessionRow {
  uint32_t src_ip = 0;
  uint32_t dst_ip = 0;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint8_t proto = 0;
  bool choose = false;
  uint8_t node = 0;  // the handling node when !choose
  uint32_t teid_dl = 0;
  uint32_t enb_ip = 0;
  uint8_t bearer = 0;

  FlowKey key() const { return FlowKey::five_tuple(src_ip, dst_ip, src_port, dst_port, proto); }
  friend bool operator==(const SessionRow&, const SessionRow&) = default;
};

// The fields, in the canonical (header) order.
enum class SessionField : uint8_t { kSrcIp, kDstIp, kSrcPort, kDstPort, kProto, kNode, kTeidDl, kEnbIp, kBearer };
inline constexpr int kSessionFields = 9;
std::string_view session_field_name(SessionField f);
inline constexpr std::string_view kSessionCsvHeader = "src_ip,dst_ip,src_port,dst_port,proto,node,teid_dl,enb_ip,bearer";

enum class SessionFileFormat : uint8_t { kUnknown, kCsv, kJsonl };

// Why a row (or the file) was rejected.
enum class SessionFileErrorKind : uint8_t {
  kNone,
  kBadJson,         // not RFC 8259 JSON, or not an object
  kBadCsv,          // wrong number of cells, unterminated quote
  kLineTooLong,     // longer than max_line
  kMissingField,    // a field (JSON) or column (CSV header) is absent
  kUnknownField,    // a field (JSON) or column (CSV header) that is not one of the nine
  kDuplicateField,  // the same field twice in one object / header
  kNestedValue,     // a JSON object or array as a field's value
  kBadKey,          // src_ip, dst_ip, src_port, dst_port or proto malformed or out of range
  kBadNode,         // not a number or `choose`, out of range, or not a member
  kBadValue,        // teid_dl, enb_ip or bearer malformed or out of range
  kNotSessionFile,  // the first line is neither a CSV header nor a JSON object (fatal)
  kIo,              // read error (fatal)
};
// "bad JSON", "missing field", ...
std::string_view session_file_error_name(SessionFileErrorKind k);

// The numbers of session files and of sb-ctl's flags: decimal (leading
// zeros stay decimal) or 0x hex; no sign, no blanks, no octal. False when
// the text is not a number; *v = the value otherwise, *overflow when it
// does not fit in 64 bits.
bool parse_number(std::string_view s, uint64_t* v, bool* overflow);

struct SessionFileError {
  SessionFileErrorKind kind = SessionFileErrorKind::kNone;
  uint64_t line = 0;    // 1-based
  uint32_t column = 0;  // bad JSON: 1-based byte column; else 0
  std::string field;    // the field at fault, "" when none
  std::string message;  // "NAME:LINE: FIELD: cause", ready to print
};

struct SessionFileOptions {
  // Node ids a row may name: bit i = node i. 0: any id below kMaxNodes.
  uint32_t member_mask = 0;
  // Longer lines are rejected (kLineTooLong) without being buffered.
  size_t max_line = 4096;
};

class SessionFileReader {
 public:
  // Reads `in`, which must outlive the reader. `name` labels messages.
  SessionFileReader(std::istream& in, std::string name, SessionFileOptions opt = {});
  ~SessionFileReader();
  SessionFileReader(const SessionFileReader&) = delete;
  SessionFileReader& operator=(const SessionFileReader&) = delete;

  // Opens `path` (kNotFound when it cannot be opened, kInvalidArgument when
  // it is a directory).
  static Result<std::unique_ptr<SessionFileReader>> open(const std::string& path, SessionFileOptions opt = {});

  enum class Next : uint8_t {
    kRow,       // *row holds the next row (line() is its line)
    kRejected,  // the next row was rejected: error() says why; call next() again
    kEnd,       // no more rows
    kFatal,     // the file cannot be read on: error() says why; next() keeps answering kFatal
  };
  [[nodiscard]] Next next(SessionRow* row);

  const SessionFileError& error() const { return err_; }
  uint64_t line() const { return line_; }
  SessionFileFormat format() const { return format_; }
  const std::string& name() const { return name_; }

 private:
  struct Source;
  Next reject(SessionFileErrorKind k, std::string field, std::string cause, uint32_t column = 0);
  Next fatal(SessionFileErrorKind k, std::string field, std::string cause);
  bool parse_header(std::string_view line);  // false: fatal
  bool fail_header(SessionFileErrorKind k, std::string field, std::string cause);
  Next parse_csv_row(std::string_view line, SessionRow* row);
  Next parse_json_row(std::string_view line, SessionRow* row);

  std::unique_ptr<std::istream> owned_;  // open()'s file
  std::unique_ptr<Source> src_;
  std::string name_;
  SessionFileOptions opt_;
  SessionFileFormat format_ = SessionFileFormat::kUnknown;
  bool fatal_ = false;
  uint64_t line_ = 0;
  std::vector<int8_t> columns_;  // CSV: column -> SessionField
  std::vector<std::string> cells_;
  SessionFileError err_;
};

// Parses one field's text (a CSV cell or a JSON string) into *row; the
// error is the cause without the field name. Exposed for the CLI's flags.
Status parse_session_field(SessionField f, std::string_view text, uint32_t member_mask, SessionRow* row);

// The canonical forms `sb-ctl session gen` writes: the CSV header line, and
// one row (CSV: decimal numbers; JSONL: IPs and node as strings, other
// numbers as JSON integers). Each ends with '\n'.
void write_session_csv_header(std::ostream& out);
void write_session_row(std::ostream& out, const SessionRow& r, SessionFileFormat f);

}  // namespace sb::rib
