#include "rib/session_file.h"

#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "rib/cluster.h"

namespace sb::rib {

namespace {

constexpr std::string_view kFieldNames[kSessionFields] = {"src_ip", "dst_ip",  "src_port", "dst_port", "proto",
                                                          "node",   "teid_dl", "enb_ip",   "bearer"};

int field_of(std::string_view name) {
  for (int i = 0; i < kSessionFields; ++i)
    if (kFieldNames[i] == name) return i;
  return -1;
}

SessionFileErrorKind kind_of(SessionField f) {
  switch (f) {
    case SessionField::kSrcIp:
    case SessionField::kDstIp:
    case SessionField::kSrcPort:
    case SessionField::kDstPort:
    case SessionField::kProto: return SessionFileErrorKind::kBadKey;
    case SessionField::kNode: return SessionFileErrorKind::kBadNode;
    default: return SessionFileErrorKind::kBadValue;
  }
}

bool is_ip(SessionField f) {
  return f == SessionField::kSrcIp || f == SessionField::kDstIp || f == SessionField::kEnbIp;
}

uint64_t max_of(SessionField f) {
  switch (f) {
    case SessionField::kSrcPort:
    case SessionField::kDstPort: return 65535;
    case SessionField::kProto: return 255;
    case SessionField::kNode: return kMaxNodes - 1;
    case SessionField::kTeidDl: return 0xffffffffULL;
    case SessionField::kBearer: return 15;
    default: return 0;
  }
}

// A value echoed in a message: at most 40 bytes, control bytes as \xNN.
std::string quote(std::string_view s) {
  std::string o = "'";
  for (size_t i = 0; i < s.size() && i < 40; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      o += b;
    } else {
      o.push_back(char(c));
    }
  }
  if (s.size() > 40) o += "...";
  return o + "'";
}

bool is_blank(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

// Decimal digits or 0x + hex digits; nothing else (no sign, no blanks, no octal).
bool parse_number_text(std::string_view s, uint64_t* v, bool* overflow) {
  *overflow = false;
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  }
  if (s.empty()) return false;
  for (char c : s)
    if (!(c >= '0' && c <= '9') && !(base == 16 && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v, base);
  if (ec == std::errc::result_out_of_range) { *overflow = true; return true; }
  return ec == std::errc() && p == s.data() + s.size();
}

std::string members_text(uint32_t mask) {
  std::string s;
  for (uint32_t i = 0; i < kMaxNodes; ++i)
    if (mask >> i & 1u) s += (s.empty() ? "" : " ") + std::to_string(i);
  return s;
}

// A numeric value for a non-IP field, range and membership checked.
Status set_number(SessionField f, uint64_t v, std::string_view text, uint32_t member_mask, SessionRow* r) {
  if (v > max_of(f))
    return Status::InvalidArgument(std::string(text) + " is out of range 0.." + std::to_string(max_of(f)));
  switch (f) {
    case SessionField::kSrcPort: r->src_port = uint16_t(v); break;
    case SessionField::kDstPort: r->dst_port = uint16_t(v); break;
    case SessionField::kProto: r->proto = uint8_t(v); break;
    case SessionField::kNode:
      if (member_mask != 0 && !(member_mask >> v & 1u))
        return Status::InvalidArgument("unknown node " + std::to_string(v) + " (members: " + members_text(member_mask) +
                                       ")");
      r->choose = false;
      r->node = uint8_t(v);
      break;
    case SessionField::kTeidDl: r->teid_dl = uint32_t(v); break;
    case SessionField::kBearer: r->bearer = uint8_t(v); break;
    default: return Status::Internal("not a number field");
  }
  return Status::Ok();
}

// ---- JSONL: one object per line through nlohmann's SAX interface --------------
// No DOM is built; nested values are walked over (depth) and rejected.
using json = nlohmann::json;

struct RowSax {
  SessionRow* row = nullptr;
  uint32_t member_mask = 0;
  int depth = 0;
  int cur = -1;       // the field whose value comes next (depth 1), -1: none/unknown
  uint32_t seen = 0;  // bit per field
  SessionFileErrorKind kind = SessionFileErrorKind::kNone;
  std::string field, cause;
  bool syntax = false;
  uint32_t column = 0;

  bool fail(SessionFileErrorKind k, std::string f, std::string c) {
    if (kind == SessionFileErrorKind::kNone) {
      kind = k;
      field = std::move(f);
      cause = std::move(c);
    }
    return true;  // parse on: a syntax error later in the line takes precedence
  }
  // A scalar value event. Returns false (stop) for a scalar at the top level.
  template <typename F>
  bool scalar(const char* what, F&& set) {
    if (depth == 0) {
      fail(SessionFileErrorKind::kBadJson, "", std::string("a row must be a JSON object, got ") + what);
      return false;
    }
    if (depth == 1 && cur >= 0) {
      const auto f = SessionField(cur);
      const Status st = set(f);
      if (!st.ok()) fail(kind_of(f), std::string(kFieldNames[cur]), st.message());
    }
    return true;
  }
  Status wrong_type(SessionField f, const std::string& got) {
    return Status::InvalidArgument(std::string("expected ") + (is_ip(f) ? "a string \"a.b.c.d\"" : "a number or a string") +
                                   ", got " + got);
  }

  bool null() { return scalar("null", [&](SessionField f) { return wrong_type(f, "null"); }); }
  bool boolean(bool v) {
    return scalar("a boolean", [&](SessionField f) { return wrong_type(f, v ? "true" : "false"); });
  }
  bool number_integer(json::number_integer_t v) {  // only negatives arrive here
    return scalar("a number", [&](SessionField f) {
      return is_ip(f) ? wrong_type(f, "the number " + std::to_string(v))
                      : Status::InvalidArgument(std::to_string(v) + " is negative");
    });
  }
  bool number_unsigned(json::number_unsigned_t v) {
    return scalar("a number", [&](SessionField f) {
      return is_ip(f) ? wrong_type(f, "the number " + std::to_string(v)) : set_number(f, v, std::to_string(v), member_mask, row);
    });
  }
  bool number_float(json::number_float_t, const json::string_t& s) {
    return scalar("a number", [&](SessionField f) {
      if (is_ip(f)) return wrong_type(f, "the number " + s);
      bool digits = !s.empty();
      for (char c : s) digits &= c >= '0' && c <= '9';
      if (digits) return Status::InvalidArgument(s + " is out of range 0.." + std::to_string(max_of(f)));
      return Status::InvalidArgument(s + " is not an integer");
    });
  }
  bool string(json::string_t& s) {
    return scalar("a string", [&](SessionField f) { return parse_session_field(f, s, member_mask, row); });
  }
  bool binary(json::binary_t&) { return true; }  // not produced by the text parser
  bool start_object(std::size_t) { return open("an object"); }
  bool start_array(std::size_t) {
    if (depth == 0) {
      fail(SessionFileErrorKind::kBadJson, "", "a row must be a JSON object, got an array");
      return false;
    }
    return open("an array");
  }
  bool open(const char* what) {
    if (depth == 1 && cur >= 0)
      fail(SessionFileErrorKind::kNestedValue, std::string(kFieldNames[cur]),
           std::string("nested JSON values are not allowed (got ") + what + ")");
    ++depth;
    return true;
  }
  bool end_object() { --depth; return true; }
  bool end_array() { --depth; return true; }
  bool key(json::string_t& k) {
    if (depth != 1) return true;
    cur = field_of(k);
    if (cur < 0) {
      fail(SessionFileErrorKind::kUnknownField, k,
           "unknown field " + quote(k) + " (the fields are " + std::string(kSessionCsvHeader) + ")");
      return true;
    }
    if (seen >> cur & 1u) {
      fail(SessionFileErrorKind::kDuplicateField, k, "field " + quote(k) + " appears twice");
      cur = -1;
      return true;
    }
    seen |= 1u << cur;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    syntax = true;
    const std::string w = ex.what();
    const size_t c = w.find("column ");
    if (c != std::string::npos) {
      column = uint32_t(std::strtoul(w.c_str() + c + 7, nullptr, 10));
      const size_t d = w.find(": ", c);
      cause = d == std::string::npos ? w : w.substr(d + 2);
    } else {
      column = uint32_t(position);
      const size_t d = w.find("] ");
      cause = d == std::string::npos ? w : w.substr(d + 2);
    }
    return false;
  }
};

}  // namespace

bool parse_number(std::string_view s, uint64_t* v, bool* overflow) { return parse_number_text(s, v, overflow); }

std::string_view session_field_name(SessionField f) { return kFieldNames[int(f)]; }

std::string_view session_file_error_name(SessionFileErrorKind k) {
  switch (k) {
    case SessionFileErrorKind::kNone: return "ok";
    case SessionFileErrorKind::kBadJson: return "bad JSON";
    case SessionFileErrorKind::kBadCsv: return "bad CSV";
    case SessionFileErrorKind::kLineTooLong: return "line too long";
    case SessionFileErrorKind::kMissingField: return "missing field";
    case SessionFileErrorKind::kUnknownField: return "unknown field";
    case SessionFileErrorKind::kDuplicateField: return "duplicate field";
    case SessionFileErrorKind::kNestedValue: return "nested value";
    case SessionFileErrorKind::kBadKey: return "bad key";
    case SessionFileErrorKind::kBadNode: return "bad node";
    case SessionFileErrorKind::kBadValue: return "bad value";
    case SessionFileErrorKind::kNotSessionFile: return "not a session file";
    case SessionFileErrorKind::kIo: return "read error";
  }
  return "?";
}

Status parse_session_field(SessionField f, std::string_view text, uint32_t member_mask, SessionRow* r) {
  if (text.empty()) return Status::InvalidArgument("empty");
  if (is_ip(f)) {
    Result<uint32_t> ip = parse_ipv4(text);
    if (!ip.ok()) return Status::InvalidArgument(quote(text) + " is not an IPv4 address (a.b.c.d)");
    (f == SessionField::kSrcIp ? r->src_ip : f == SessionField::kDstIp ? r->dst_ip : r->enb_ip) = ip.value();
    return Status::Ok();
  }
  if (f == SessionField::kProto) {
    if (text == "tcp" || text == "TCP") { r->proto = 6; return Status::Ok(); }
    if (text == "udp" || text == "UDP") { r->proto = 17; return Status::Ok(); }
    if (text == "icmp" || text == "ICMP") { r->proto = 1; return Status::Ok(); }
  }
  if (f == SessionField::kNode && text == "choose") {
    r->choose = true;
    r->node = 0;
    return Status::Ok();
  }
  uint64_t v = 0;
  bool overflow = false;
  if (!parse_number_text(text, &v, &overflow)) {
    const char* expect = f == SessionField::kProto  ? " is not an IP protocol (0..255, tcp, udp, icmp)"
                         : f == SessionField::kNode ? " is not a node id or choose"
                                                    : " is not a number (decimal or 0x hex)";
    return Status::InvalidArgument(quote(text) + expect);
  }
  if (overflow) return Status::InvalidArgument(quote(text) + " is out of range 0.." + std::to_string(max_of(f)));
  return set_number(f, v, text, member_mask, r);
}

// ---- line source --------------------------------------------------------------
struct SessionFileReader::Source {
  std::istream& in;
  std::vector<char> buf = std::vector<char>(size_t(1) << 16);
  size_t pos = 0, len = 0;
  bool eof = false, bad = false;
  std::string line;

  explicit Source(std::istream& i) : in(i) {}

  // The next line into `line` without its '\n' and one trailing '\r'; false
  // at the end of input. A line longer than `max` keeps its first max+1
  // bytes and sets *too_long; the rest is skipped without being stored.
  bool next(size_t max, bool* too_long) {
    line.clear();
    *too_long = false;
    bool any = false;
    for (;;) {
      if (pos == len) {
        if (eof) break;
        in.read(buf.data(), std::streamsize(buf.size()));
        len = size_t(in.gcount());
        pos = 0;
        if (in.bad()) bad = true;
        if (len == 0) {
          eof = true;
          break;
        }
      }
      any = true;
      const char* b = buf.data() + pos;
      const auto* nl = static_cast<const char*>(std::memchr(b, '\n', len - pos));
      const size_t n = nl ? size_t(nl - b) : len - pos;
      const size_t room = max + 2 > line.size() ? max + 2 - line.size() : 0;  // +2: '\r' and one over
      line.append(b, std::min(n, room));
      if (n > room) *too_long = true;
      pos += n;
      if (nl) {
        ++pos;
        break;
      }
    }
    if (!any) return false;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.size() > max) *too_long = true;
    return true;
  }
};

SessionFileReader::SessionFileReader(std::istream& in, std::string name, SessionFileOptions opt)
    : src_(std::make_unique<Source>(in)), name_(std::move(name)), opt_(opt) {}

SessionFileReader::~SessionFileReader() = default;

Result<std::unique_ptr<SessionFileReader>> SessionFileReader::open(const std::string& path, SessionFileOptions opt) {
  // A directory opens like a file and fails only at the first read, as a
  // "read error" at line 0: say what it is.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return Status::InvalidArgument(path + ": is a directory, not a session file");
  auto f = std::make_unique<std::ifstream>(path, std::ios::binary);
  if (!*f) return Status::NotFound(path + ": cannot open the session file");
  auto r = std::make_unique<SessionFileReader>(*f, path, opt);
  r->owned_ = std::move(f);
  return r;
}

SessionFileReader::Next SessionFileReader::reject(SessionFileErrorKind k, std::string field, std::string cause,
                                                  uint32_t column) {
  err_.kind = k;
  err_.line = line_;
  err_.column = column;
  err_.field = std::move(field);
  err_.message = name_ + ":" + std::to_string(line_) + ":";
  if (column > 0) err_.message += std::to_string(column) + ":";
  err_.message += " ";
  if (k == SessionFileErrorKind::kBadJson) err_.message += "bad JSON: ";
  const bool value_error = k == SessionFileErrorKind::kBadKey || k == SessionFileErrorKind::kBadNode ||
                           k == SessionFileErrorKind::kBadValue || k == SessionFileErrorKind::kNestedValue;
  if (value_error) err_.message += err_.field + ": ";
  err_.message += cause;
  return Next::kRejected;
}

SessionFileReader::Next SessionFileReader::fatal(SessionFileErrorKind k, std::string field, std::string cause) {
  reject(k, std::move(field), std::move(cause));
  fatal_ = true;
  return Next::kFatal;
}

bool SessionFileReader::fail_header(SessionFileErrorKind k, std::string field, std::string cause) {
  fatal(k, std::move(field), std::move(cause));
  return false;
}

namespace {

// Splits a CSV line into trimmed cells; "..." quoting with "" inside.
// Returns "" or the error.
std::string split_cells(std::string_view l, std::vector<std::string>* cells) {
  cells->clear();
  size_t i = 0;
  for (;;) {
    while (i < l.size() && is_blank(l[i])) ++i;
    std::string cell;
    if (i < l.size() && l[i] == '"') {
      const size_t open = i++;
      bool closed = false;
      while (i < l.size()) {
        if (l[i] == '"') {
          if (i + 1 < l.size() && l[i + 1] == '"') { cell.push_back('"'); i += 2; continue; }
          ++i;
          closed = true;
          break;
        }
        cell.push_back(l[i++]);
      }
      if (!closed) return "unterminated quoted cell at column " + std::to_string(open + 1);
      while (i < l.size() && is_blank(l[i])) ++i;
      if (i < l.size() && l[i] != ',') return "text after a quoted cell at column " + std::to_string(i + 1);
    } else {
      const size_t b = i;
      while (i < l.size() && l[i] != ',') ++i;
      cell = std::string(trim(l.substr(b, i - b)));
    }
    cells->push_back(std::move(cell));
    if (i >= l.size()) return "";
    ++i;  // ','
  }
}

}  // namespace

bool SessionFileReader::parse_header(std::string_view l) {
  const std::string e = split_cells(l, &cells_);
  bool any_known = false;
  for (const auto& c : cells_) any_known |= field_of(c) >= 0;
  if (!any_known)
    return fail_header(SessionFileErrorKind::kNotSessionFile, "",
                 "expected a CSV header (" + std::string(kSessionCsvHeader) + ") or a JSON object, got " + quote(l));
  if (!e.empty()) return fail_header(SessionFileErrorKind::kBadCsv, "", "CSV header: " + e);
  columns_.clear();
  uint32_t seen = 0;
  for (const auto& c : cells_) {
    const int f = field_of(c);
    if (f < 0)
      return fail_header(SessionFileErrorKind::kUnknownField, c,
                   "CSV header: unknown column " + quote(c) + " (the columns are " + std::string(kSessionCsvHeader) + ")");
    if (seen >> f & 1u) return fail_header(SessionFileErrorKind::kDuplicateField, c, "CSV header: column " + quote(c) + " appears twice");
    seen |= 1u << f;
    columns_.push_back(int8_t(f));
  }
  for (int f = 0; f < kSessionFields; ++f)
    if (!(seen >> f & 1u))
      return fail_header(SessionFileErrorKind::kMissingField, std::string(kFieldNames[f]),
                   "CSV header: missing column '" + std::string(kFieldNames[f]) + "'");
  format_ = SessionFileFormat::kCsv;
  return true;
}

SessionFileReader::Next SessionFileReader::parse_csv_row(std::string_view l, SessionRow* row) {
  const std::string e = split_cells(l, &cells_);
  if (!e.empty()) return reject(SessionFileErrorKind::kBadCsv, "", e);
  if (cells_.size() != columns_.size())
    return reject(SessionFileErrorKind::kBadCsv, "",
                  "has " + std::to_string(cells_.size()) + " fields, the header has " + std::to_string(columns_.size()));
  SessionRow r;
  for (size_t i = 0; i < cells_.size(); ++i) {
    const auto f = SessionField(columns_[i]);
    const Status st = parse_session_field(f, cells_[i], opt_.member_mask, &r);
    if (!st.ok()) return reject(kind_of(f), std::string(kFieldNames[int(f)]), st.message());
  }
  *row = r;
  return Next::kRow;
}

SessionFileReader::Next SessionFileReader::parse_json_row(std::string_view l, SessionRow* row) {
  SessionRow r;
  RowSax sax;
  sax.row = &r;
  sax.member_mask = opt_.member_mask;
  const bool ok = json::sax_parse(l.begin(), l.end(), &sax);
  if (sax.syntax) return reject(SessionFileErrorKind::kBadJson, "", sax.cause, std::max<uint32_t>(sax.column, 1));
  if (sax.kind != SessionFileErrorKind::kNone) return reject(sax.kind, sax.field, sax.cause);
  if (!ok) return reject(SessionFileErrorKind::kBadJson, "", "not a JSON object");
  for (int f = 0; f < kSessionFields; ++f)
    if (!(sax.seen >> f & 1u))
      return reject(SessionFileErrorKind::kMissingField, std::string(kFieldNames[f]),
                    "missing field '" + std::string(kFieldNames[f]) + "'");
  *row = r;
  return Next::kRow;
}

SessionFileReader::Next SessionFileReader::next(SessionRow* row) {
  for (;;) {
    if (fatal_) return Next::kFatal;
    bool too_long = false;
    if (!src_->next(opt_.max_line, &too_long)) {
      if (src_->bad) return fatal(SessionFileErrorKind::kIo, "", "read error");
      return Next::kEnd;
    }
    ++line_;
    std::string_view l = src_->line;
    if (line_ == 1 && l.substr(0, 3) == "\xEF\xBB\xBF") l.remove_prefix(3);
    size_t b = 0;
    while (b < l.size() && (is_blank(l[b]) || l[b] == '\r')) ++b;
    if (b == l.size() || l[b] == '#') continue;
    if (too_long) {
      const std::string cause = "line longer than " + std::to_string(opt_.max_line) + " bytes";
      if (format_ == SessionFileFormat::kUnknown) return fatal(SessionFileErrorKind::kLineTooLong, "", cause);
      return reject(SessionFileErrorKind::kLineTooLong, "", cause);
    }
    if (format_ == SessionFileFormat::kUnknown) {
      if (l[b] != '{') {
        if (!parse_header(l)) return Next::kFatal;
        continue;
      }
      format_ = SessionFileFormat::kJsonl;
    }
    return format_ == SessionFileFormat::kCsv ? parse_csv_row(l, row) : parse_json_row(l, row);
  }
}

// ---- writers ----------------------------------------------------------------------
void write_session_csv_header(std::ostream& out) { out << kSessionCsvHeader << '\n'; }

void write_session_row(std::ostream& out, const SessionRow& r, SessionFileFormat f) {
  const std::string node = r.choose ? "choose" : std::to_string(unsigned(r.node));
  if (f == SessionFileFormat::kJsonl) {
    out << "{\"src_ip\":\"" << ipv4_to_string(r.src_ip) << "\",\"dst_ip\":\"" << ipv4_to_string(r.dst_ip)
        << "\",\"src_port\":" << r.src_port << ",\"dst_port\":" << r.dst_port << ",\"proto\":" << unsigned(r.proto)
        << ",\"node\":\"" << node << "\",\"teid_dl\":" << r.teid_dl << ",\"enb_ip\":\"" << ipv4_to_string(r.enb_ip)
        << "\",\"bearer\":" << unsigned(r.bearer) << "}\n";
  } else {
    out << ipv4_to_string(r.src_ip) << ',' << ipv4_to_string(r.dst_ip) << ',' << r.src_port << ',' << r.dst_port << ','
        << unsigned(r.proto) << ',' << node << ',' << r.teid_dl << ',' << ipv4_to_string(r.enb_ip) << ','
        << unsigned(r.bearer) << '\n';
  }
}

}  // namespace sb::rib
