// The session file reader: fixtures for both formats, one fixture per error
// class with its line number, a model-based property test (random rows in
// random legal spellings, random corruptions at known lines, against the
// list the reader must return), canonical writer round trips, and huge
// inputs streamed in constant memory.
#include "rib/session_file.h"

#include <sys/resource.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <random>
#include <sstream>
#include <streambuf>

#include "core/test_util.h"

using namespace sb;
using namespace sb::rib;
using Next = SessionFileReader::Next;
using Kind = SessionFileErrorKind;

namespace {

// Everything a reader returns, in order.
struct Event {
  Next what;
  SessionRow row;          // kRow
  uint64_t line = 0;       // kRow, kRejected, kFatal
  Kind kind = Kind::kNone; // kRejected, kFatal
  std::string message;
};

std::vector<Event> read_all(const std::string& text, SessionFileOptions opt = {}) {
  std::istringstream in(text);
  SessionFileReader r(in, "f", opt);
  std::vector<Event> v;
  for (;;) {
    Event e;
    e.what = r.next(&e.row);
    if (e.what == Next::kEnd) break;
    if (e.what == Next::kRow) {
      e.line = r.line();
    } else {
      e.line = r.error().line;
      e.kind = r.error().kind;
      e.message = r.error().message;
    }
    v.push_back(e);
    if (e.what == Next::kFatal) break;
  }
  return v;
}

SessionRow row(uint32_t i) {
  SessionRow r;
  r.src_ip = 0xc6120000u + i;
  r.dst_ip = 0xc6130000u + (i * 7919u) % 65536;
  r.src_port = uint16_t(1024 + i % 60000);
  r.dst_port = uint16_t(i * 31u);
  r.proto = i % 2 ? 6 : 17;
  r.choose = i % 5 == 0;
  r.node = r.choose ? 0 : uint8_t(i % 4);
  r.teid_dl = i * 2654435761u;
  r.enb_ip = 0xc6130000u + i % 256;
  r.bearer = uint8_t(5 + i % 11);
  return r;
}

const std::string kHeader = std::string(kSessionCsvHeader) + "\n";

}  // namespace

TEST_CASE("session file: CSV spellings (order, quotes, blanks, comments, CRLF, BOM, hex, names)", "[session_file]") {
  const std::string text =
      "\xEF\xBB\xBF# a comment before the header\n"
      "\n"
      " bearer , enb_ip,teid_dl,node,proto,dst_port,src_port,dst_ip,src_ip\r\n"
      "5,198.19.0.200,0x10,choose,tcp,80,1024,198.19.0.1,198.18.0.1\r\n"
      "   # indented comment\n"
      "\t\n"
      "\"15\", \"198.19.0.201\" ,4294967295,3,UDP,0x51,01025,198.19.0.2,198.18.0.2\n"
      "0,1.2.3.4,0,31,0,0,0,0.0.0.0,255.255.255.255";  // no final newline
  auto v = read_all(text);
  REQUIRE(v.size() == 3);
  for (const auto& e : v) REQUIRE(e.what == Next::kRow);
  CHECK(v[0].line == 4);
  CHECK(v[0].row.src_ip == 0xc6120001u);
  CHECK(v[0].row.src_port == 1024);
  CHECK(v[0].row.proto == 6);
  CHECK(v[0].row.choose);
  CHECK(v[0].row.teid_dl == 0x10);
  CHECK(v[0].row.bearer == 5);
  CHECK(v[1].line == 7);
  CHECK(v[1].row.proto == 17);
  CHECK(v[1].row.dst_port == 0x51);
  CHECK(v[1].row.src_port == 1025);  // leading zeros are decimal, never octal
  CHECK(!v[1].row.choose);
  CHECK(v[1].row.node == 3);
  CHECK(v[1].row.teid_dl == 0xffffffffu);
  CHECK(v[1].row.enb_ip == 0xc61300c9u);
  CHECK(v[1].row.bearer == 15);
  CHECK(v[2].line == 8);
  CHECK(v[2].row.node == 31);
  CHECK(v[2].row.src_ip == 0xffffffffu);
}

TEST_CASE("session file: JSONL spellings (escapes, numbers as strings, any order, blanks, comments)", "[session_file]") {
  const std::string text =
      "# comment\n"
      "{\"src_ip\":\"198.18.0.1\",\"dst_ip\":\"198.19.0.1\",\"src_port\":1024,\"dst_port\":80,\"proto\":6,"
      "\"node\":\"choose\",\"teid_dl\":16,\"enb_ip\":\"198.19.0.200\",\"bearer\":5}\n"
      "\r\n"
      "  { \"bearer\" : \"0xf\", \"enb_ip\": \"198.19.0.9\", \"teid_dl\": \"0x11\", \"node\": 1, \"proto\": \"tcp\",\t"
      "\"dst_port\": \"81\", \"src_port\": 1025, \"dst_ip\": \"198.19.0.2\", \"src_ip\": \"198.18.0.2\" }  \r\n"
      // \u escapes in keys and values, an escaped solidus is just '/'-free text here.
      "{\"src\\u005fip\":\"\\u0031\\u0039\\u0038.18.0.3\",\"dst_ip\":\"198.19.0.3\",\"src_port\":0,\"dst_port\":0,"
      "\"proto\":\"icmp\",\"node\":\"2\",\"teid_dl\":0,\"enb_ip\":\"198.19.0.9\",\"bearer\":0}\n";
  auto v = read_all(text);
  REQUIRE(v.size() == 3);
  for (const auto& e : v) REQUIRE(e.what == Next::kRow);
  CHECK(v[0].line == 2);
  CHECK(v[0].row.choose);
  CHECK(v[1].line == 4);
  CHECK(v[1].row.bearer == 15);
  CHECK(v[1].row.teid_dl == 0x11);
  CHECK(v[1].row.node == 1);
  CHECK(v[1].row.proto == 6);
  CHECK(v[1].row.dst_port == 81);
  CHECK(v[2].line == 5);
  CHECK(v[2].row.src_ip == 0xc6120003u);
  CHECK(v[2].row.proto == 1);
  CHECK(v[2].row.node == 2);
}

TEST_CASE("session file: every error class, with its line (and column for JSON)", "[session_file]") {
  const std::string ok = "198.18.0.1,198.19.0.1,1024,80,6,choose,16,198.19.0.200,5\n";
  const std::string jok =
      "{\"src_ip\":\"198.18.0.1\",\"dst_ip\":\"198.19.0.1\",\"src_port\":1024,\"dst_port\":80,\"proto\":6,"
      "\"node\":\"choose\",\"teid_dl\":16,\"enb_ip\":\"198.19.0.200\",\"bearer\":5}\n";
  // jok with field `k`'s value replaced by `v` (raw JSON text).
  auto jwith = [&](const std::string& k, const std::string& v) {
    std::string s = jok;
    const size_t a = s.find("\"" + k + "\":") + k.size() + 3;
    const size_t b = s.find_first_of(",}", s[a] == '"' ? s.find('"', a + 1) : a);
    return s.substr(0, a) + v + s.substr(b);
  };
  struct Case {
    std::string text;
    Next what;
    uint64_t line;
    Kind kind;
    std::string want;  // a substring of the message
  };
  const std::vector<Case> cases = {
      // CSV rows
      {kHeader + ok + "198.18.0.1,198.19.0.1,1024,80,6,choose,16\n", Next::kRejected, 3, Kind::kBadCsv,
       "f:3: has 7 fields, the header has 9"},
      {kHeader + "\"198.18.0.1,198.19.0.1,1024,80,6,choose,16,198.19.0.200,5\n", Next::kRejected, 2, Kind::kBadCsv,
       "f:2: unterminated quoted cell at column 1"},
      {kHeader + "\"198.18.0.1\"x,198.19.0.1,1024,80,6,choose,16,198.19.0.200,5\n", Next::kRejected, 2, Kind::kBadCsv,
       "text after a quoted cell"},
      {kHeader + "198.18.0.256,198.19.0.1,1024,80,6,choose,16,198.19.0.200,5\n", Next::kRejected, 2, Kind::kBadKey,
       "f:2: src_ip: '198.18.0.256' is not an IPv4 address"},
      {kHeader + "198.18.0.1,198.19.0.1,70000,80,6,choose,16,198.19.0.200,5\n", Next::kRejected, 2, Kind::kBadKey,
       "f:2: src_port: 70000 is out of range 0..65535"},
      {kHeader + "198.18.0.1,198.19.0.1,1,-80,6,choose,16,198.19.0.200,5\n", Next::kRejected, 2, Kind::kBadKey,
       "f:2: dst_port: '-80' is not a number"},
      {kHeader + "198.18.0.1,198.19.0.1,1,80,sctp,choose,16,198.19.0.200,5\n", Next::kRejected, 2, Kind::kBadKey,
       "f:2: proto: 'sctp' is not an IP protocol"},
      {kHeader + "198.18.0.1,198.19.0.1,1,80,256,choose,16,198.19.0.200,5\n", Next::kRejected, 2, Kind::kBadKey,
       "f:2: proto: 256 is out of range 0..255"},
      {kHeader + "198.18.0.1,198.19.0.1,1,80,6,banana,16,198.19.0.200,5\n", Next::kRejected, 2, Kind::kBadNode,
       "f:2: node: 'banana' is not a node id or choose"},
      {kHeader + "198.18.0.1,198.19.0.1,1,80,6,32,16,198.19.0.200,5\n", Next::kRejected, 2, Kind::kBadNode,
       "f:2: node: 32 is out of range 0..31"},
      {kHeader + "198.18.0.1,198.19.0.1,1,80,6,1,0x1ffffffff,198.19.0.200,5\n", Next::kRejected, 2, Kind::kBadValue,
       "f:2: teid_dl: 0x1ffffffff is out of range 0..4294967295"},
      {kHeader + "198.18.0.1,198.19.0.1,1,80,6,1,99999999999999999999999,198.19.0.200,5\n", Next::kRejected, 2,
       Kind::kBadValue, "teid_dl: '99999999999999999999999' is out of range"},
      {kHeader + "198.18.0.1,198.19.0.1,1,80,6,1,1,198.19.0,5\n", Next::kRejected, 2, Kind::kBadValue,
       "f:2: enb_ip: '198.19.0' is not an IPv4 address"},
      {kHeader + "198.18.0.1,198.19.0.1,1,80,6,1,1,198.19.0.1,16\n", Next::kRejected, 2, Kind::kBadValue,
       "f:2: bearer: 16 is out of range 0..15"},
      {kHeader + "198.18.0.1,198.19.0.1,1,80,6,1,1,198.19.0.1,\n", Next::kRejected, 2, Kind::kBadValue,
       "f:2: bearer: empty"},
      // CSV headers: fatal, line of the header
      {"# c\n" + std::string("src_ip,dst_ip,src_port,dst_port,proto,node,teid_dl,enb_ip\n") + ok, Next::kFatal, 2,
       Kind::kMissingField, "f:2: CSV header: missing column 'bearer'"},
      {std::string("src_ip,dst_ip,src_port,dst_port,proto,node,teid_dl,enb_ip,bearer,qos\n") + ok, Next::kFatal, 1,
       Kind::kUnknownField, "f:1: CSV header: unknown column 'qos'"},
      {std::string("src_ip,dst_ip,src_port,dst_port,proto,node,teid_dl,enb_ip,bearer,src_ip\n") + ok, Next::kFatal, 1,
       Kind::kDuplicateField, "f:1: CSV header: column 'src_ip' appears twice"},
      {"hello\n", Next::kFatal, 1, Kind::kNotSessionFile, "f:1: expected a CSV header"},
      {"198.18.0.1,198.19.0.1,1024,80,6,choose,16,198.19.0.200,5\n", Next::kFatal, 1, Kind::kNotSessionFile,
       "expected a CSV header"},
      {std::string(5000, 'x') + "\n" + ok, Next::kFatal, 1, Kind::kLineTooLong, "f:1: line longer than 4096 bytes"},
      {kHeader + std::string(5000, '1') + "\n", Next::kRejected, 2, Kind::kLineTooLong, "f:2: line longer than 4096"},
      // JSONL
      {jok + "{\"src_ip\":\"198.18.0.1\"\n", Next::kRejected, 2, Kind::kBadJson, "f:2:23: bad JSON: syntax error"},
      {jok + "{\"src_ip\":198.18.0.1}\n", Next::kRejected, 2, Kind::kBadJson, "f:2:"},
      {jok + "{\"src_ip\":\"a\\qb\"}\n", Next::kRejected, 2, Kind::kBadJson, "bad JSON: "},
      {jok + "{\"src_ip\":\"\xff\"}\n", Next::kRejected, 2, Kind::kBadJson, "bad JSON: "},
      {jok + jok.substr(0, jok.size() - 1) + " x\n", Next::kRejected, 2, Kind::kBadJson, "bad JSON: "},
      {jok + "[1,2]\n", Next::kRejected, 2, Kind::kBadJson, "a row must be a JSON object, got an array"},
      {jok + "5\n", Next::kRejected, 2, Kind::kBadJson, "f:2: bad JSON: "},
      {jok + jwith("teid_dl", "{\"a\":1}"), Next::kRejected, 2, Kind::kNestedValue,
       "f:2: teid_dl: nested JSON values are not allowed (got an object)"},
      {jok + jwith("node", "[1]"), Next::kRejected, 2, Kind::kNestedValue, "f:2: node: nested JSON values"},
      {jok + jwith("bearer", "5,\"qos\":9"), Next::kRejected, 2, Kind::kUnknownField, "f:2: unknown field 'qos'"},
      {jok + jwith("bearer", "5,\"bearer\":6"), Next::kRejected, 2, Kind::kDuplicateField,
       "f:2: field 'bearer' appears twice"},
      {jok + "{\"src_ip\":\"198.18.0.1\"}\n", Next::kRejected, 2, Kind::kMissingField, "f:2: missing field 'dst_ip'"},
      {jok + jwith("src_ip", "\"198.18.0.x\""), Next::kRejected, 2, Kind::kBadKey, "f:2: src_ip: '198.18.0.x' is not"},
      {jok + jwith("dst_ip", "3339911169"), Next::kRejected, 2, Kind::kBadKey,
       "f:2: dst_ip: expected a string \"a.b.c.d\", got the number 3339911169"},
      {jok + jwith("src_port", "-1"), Next::kRejected, 2, Kind::kBadKey, "f:2: src_port: -1 is negative"},
      {jok + jwith("dst_port", "80.5"), Next::kRejected, 2, Kind::kBadKey, "f:2: dst_port: 80.5 is not an integer"},
      {jok + jwith("dst_port", "1e3"), Next::kRejected, 2, Kind::kBadKey, "dst_port: 1e3 is not an integer"},
      {jok + jwith("proto", "true"), Next::kRejected, 2, Kind::kBadKey,
       "f:2: proto: expected a number or a string, got true"},
      {jok + jwith("node", "null"), Next::kRejected, 2, Kind::kBadNode, "f:2: node: expected a number or a string, got null"},
      {jok + jwith("node", "40"), Next::kRejected, 2, Kind::kBadNode, "f:2: node: 40 is out of range 0..31"},
      {jok + jwith("teid_dl", "18446744073709551616"), Next::kRejected, 2, Kind::kBadValue,
       "f:2: teid_dl: 18446744073709551616 is out of range"},
      {jok + jwith("bearer", "\"0x10\""), Next::kRejected, 2, Kind::kBadValue, "f:2: bearer: 0x10 is out of range 0..15"},
      // A syntax error wins over an earlier field error on the same line.
      {jok + "{\"qos\":1,\n", Next::kRejected, 2, Kind::kBadJson, "bad JSON"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    const auto v = read_all(c.text);
    // Every case has exactly one bad line; good lines before it are rows.
    auto it = std::find_if(v.begin(), v.end(), [](const Event& e) { return e.what != Next::kRow; });
    REQUIRE(it != v.end());
    INFO(it->message);
    CHECK(it->what == c.what);
    CHECK(it->line == c.line);
    CHECK(it->kind == c.kind);
    CHECK(test::has(it->message, c.want));
    // Rejections do not end the read: a good row after a bad one is read.
    if (c.what == Next::kRejected) {
      const std::string more = c.text + (c.text.find('{') == 0 ? jok : ok);
      const auto w = read_all(more);
      REQUIRE(!w.empty());
      CHECK(w.back().what == Next::kRow);
    }
  }
}

TEST_CASE("session file: member mask names the members", "[session_file]") {
  SessionFileOptions o;
  o.member_mask = 0b1011;
  const auto v = read_all(kHeader + "198.18.0.1,198.19.0.1,1,80,6,2,1,198.19.0.1,5\n"
                                    "198.18.0.1,198.19.0.1,1,80,6,3,1,198.19.0.1,5\n", o);
  REQUIRE(v.size() == 2);
  CHECK(v[0].what == Next::kRejected);
  CHECK(v[0].kind == Kind::kBadNode);
  CHECK(v[0].message == "f:2: node: unknown node 2 (members: 0 1 3)");
  CHECK(v[1].what == Next::kRow);
}

namespace {

// One legal spelling of a number field, chosen at random.
std::string num_text(std::mt19937_64& rng, uint64_t v) {
  switch (rng() % 3) {
    case 0: return std::to_string(v);
    case 1: { char b[32]; std::snprintf(b, sizeof b, "0x%llx", (unsigned long long)v); return b; }
    default: { char b[32]; std::snprintf(b, sizeof b, "0X%llX", (unsigned long long)v); return b; }
  }
}

std::string field_text(std::mt19937_64& rng, const SessionRow& r, int f) {
  switch (SessionField(f)) {
    case SessionField::kSrcIp: return ipv4_to_string(r.src_ip);
    case SessionField::kDstIp: return ipv4_to_string(r.dst_ip);
    case SessionField::kSrcPort: return num_text(rng, r.src_port);
    case SessionField::kDstPort: return num_text(rng, r.dst_port);
    case SessionField::kProto:
      if (r.proto == 6 && rng() % 2) return "tcp";
      if (r.proto == 17 && rng() % 2) return "UDP";
      return num_text(rng, r.proto);
    case SessionField::kNode: return r.choose ? "choose" : num_text(rng, r.node);
    case SessionField::kTeidDl: return num_text(rng, r.teid_dl);
    case SessionField::kEnbIp: return ipv4_to_string(r.enb_ip);
    case SessionField::kBearer: return num_text(rng, r.bearer);
  }
  return "";
}

// JSON string literal of s with random (legal) escaping.
std::string json_str(std::mt19937_64& rng, const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (rng() % 8 == 0) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", unsigned(uint8_t(c)));
      o += b;
    } else {
      o.push_back(c);
    }
  }
  return o + "\"";
}

SessionRow random_row(std::mt19937_64& rng) {
  SessionRow r;
  r.src_ip = uint32_t(rng());
  r.dst_ip = uint32_t(rng());
  r.src_port = uint16_t(rng());
  r.dst_port = uint16_t(rng());
  r.proto = rng() % 3 == 0 ? uint8_t(rng()) : rng() % 2 ? 6 : 17;
  r.choose = rng() % 4 == 0;
  r.node = r.choose ? 0 : uint8_t(rng() % 32);
  r.teid_dl = uint32_t(rng());
  r.enb_ip = uint32_t(rng());
  r.bearer = uint8_t(rng() % 16);
  return r;
}

}  // namespace

TEST_CASE("session file: model-based, random legal spellings and corruptions at known lines", "[session_file]") {
  std::mt19937_64 rng(test_seed(20240611));
  for (int round = 0; round < 400; ++round) {
    const bool jsonl = rng() % 2;
    const std::string eol = rng() % 3 == 0 ? "\r\n" : "\n";
    std::string text;
    uint64_t line = 0;
    std::vector<Event> want;
    std::vector<int> order(kSessionFields);
    for (int i = 0; i < kSessionFields; ++i) order[size_t(i)] = i;
    if (!jsonl) {
      std::shuffle(order.begin(), order.end(), rng);
      for (int i = 0; i < kSessionFields; ++i)
        text += (i ? "," : "") + std::string(session_field_name(SessionField(order[size_t(i)])));
      text += eol;
      ++line;
    }
    const int rows = int(rng() % 60);
    for (int i = 0; i < rows; ++i) {
      while (rng() % 6 == 0) {  // blank lines and comments
        text += rng() % 2 ? "# note, with a comma" + eol : (rng() % 2 ? " \t" : "") + eol;
        ++line;
      }
      const SessionRow r = random_row(rng);
      std::vector<std::string> vals(kSessionFields);
      for (int f = 0; f < kSessionFields; ++f) vals[size_t(f)] = field_text(rng, r, f);
      // Corruption: -1 none; else which one.
      const int bad = rng() % 5 == 0 ? int(rng() % 6) : -1;
      Kind kind = Kind::kNone;
      const int bf = int(rng() % kSessionFields);
      if (bad == 0) {  // an out-of-range number or a non-IP, in field bf
        const auto f = SessionField(bf);
        vals[size_t(bf)] = f == SessionField::kSrcIp || f == SessionField::kDstIp || f == SessionField::kEnbIp
                               ? "1.2.3.256"
                           : f == SessionField::kTeidDl ? "4294967296"
                                                        : "70000";
        kind = f == SessionField::kNode ? Kind::kBadNode
               : f == SessionField::kTeidDl || f == SessionField::kEnbIp || f == SessionField::kBearer ? Kind::kBadValue
                                                                                                       : Kind::kBadKey;
      } else if (bad == 1) {  // garbage in field bf
        vals[size_t(bf)] = "zz";
        kind = bf == int(SessionField::kNode) ? Kind::kBadNode
               : bf == int(SessionField::kTeidDl) || bf == int(SessionField::kEnbIp) || bf == int(SessionField::kBearer)
                   ? Kind::kBadValue
                   : Kind::kBadKey;
      }
      std::string l;
      if (jsonl) {
        std::vector<int> o = order;
        std::shuffle(o.begin(), o.end(), rng);
        if (bad == 2) { o.erase(o.begin() + bf % kSessionFields); kind = Kind::kMissingField; }
        if (bad == 3) { o.push_back(o[0]); kind = Kind::kDuplicateField; }
        l = rng() % 2 ? "{" : " { ";
        for (size_t j = 0; j < o.size(); ++j) {
          const int f = o[j];
          const auto sf = SessionField(f);
          l += (j ? "," : "") + std::string(rng() % 2 ? " " : "") + json_str(rng, std::string(session_field_name(sf))) + ":";
          const bool numeric = !(sf == SessionField::kSrcIp || sf == SessionField::kDstIp || sf == SessionField::kEnbIp);
          const std::string& v = vals[size_t(f)];
          const bool plain_digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos &&
                                    (v.size() == 1 || v[0] != '0');
          l += numeric && plain_digits && rng() % 2 ? v : json_str(rng, v);
        }
        if (bad == 4) { l += ",\"extra\":1"; kind = Kind::kUnknownField; }
        l += "}";
        if (bad == 5) { l.pop_back(); kind = Kind::kBadJson; }
      } else {
        std::vector<std::string> cells;
        for (int j = 0; j < kSessionFields; ++j) cells.push_back(vals[size_t(order[size_t(j)])]);
        if (bad >= 2 && bad <= 4) {  // a missing or an extra cell
          if (rng() % 2) cells.pop_back();
          else cells.push_back("1");
          kind = Kind::kBadCsv;
        }
        for (size_t j = 0; j < cells.size(); ++j) {
          std::string cell = cells[j];
          if (rng() % 6 == 0) cell = "\"" + cell + "\"";
          if (rng() % 6 == 0) cell = " " + cell + "\t";
          l += (j ? "," : "") + cell;
        }
        if (bad == 5) { l += ",\"open"; kind = Kind::kBadCsv; }
      }
      text += l + eol;
      ++line;
      Event e;
      e.line = line;
      if (kind == Kind::kNone) {
        e.what = Next::kRow;
        e.row = r;
      } else {
        e.what = Next::kRejected;
        e.kind = kind;
      }
      want.push_back(e);
    }
    INFO("round " << round << "\n" << text);
    const auto got = read_all(text);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("event " << i << ": " << got[i].message);
      REQUIRE(got[i].what == want[i].what);
      CHECK(got[i].line == want[i].line);
      if (want[i].what == Next::kRow) CHECK(got[i].row == want[i].row);
      else CHECK(got[i].kind == want[i].kind);
    }
  }
}

TEST_CASE("session file: the canonical writer round-trips in both formats", "[session_file]") {
  std::mt19937_64 rng(test_seed(7));
  std::vector<SessionRow> rows;
  for (int i = 0; i < 5000; ++i) rows.push_back(random_row(rng));
  for (auto fmt : {SessionFileFormat::kCsv, SessionFileFormat::kJsonl}) {
    std::ostringstream out;
    if (fmt == SessionFileFormat::kCsv) write_session_csv_header(out);
    for (const auto& r : rows) write_session_row(out, r, fmt);
    std::istringstream in(out.str());
    SessionFileReader rd(in, "w");
    SessionRow r;
    size_t i = 0;
    for (Next n; (n = rd.next(&r)) != Next::kEnd; ++i) {
      INFO(rd.error().message);
      REQUIRE(n == Next::kRow);
      REQUIRE(i < rows.size());
      CHECK(r == rows[i]);
    }
    CHECK(i == rows.size());
    CHECK(rd.format() == fmt);
  }
}

namespace {

// A read-only stream of `rows` generated rows (row(i)), never held in memory.
class GenBuf : public std::streambuf {
 public:
  GenBuf(uint64_t rows, SessionFileFormat f, size_t long_line_at = ~size_t(0), size_t long_line_len = 0)
      : rows_(rows), f_(f), long_at_(long_line_at), long_len_(long_line_len) {
    if (f_ == SessionFileFormat::kCsv) buf_ = kHeader;
    setg(buf_.data(), buf_.data(), buf_.data() + buf_.size());
  }

 protected:
  int_type underflow() override {
    buf_.clear();
    if (long_left_ > 0) {
      const size_t n = std::min<size_t>(long_left_, 1 << 16);
      buf_.assign(n, '7');
      long_left_ -= n;
      if (long_left_ == 0) buf_ += "\n";
    } else {
      std::ostringstream o;
      while (next_ < rows_ && o.tellp() < (1 << 16)) {
        if (next_ == long_at_ && long_left_ == 0 && !long_done_) {
          long_done_ = true;
          long_left_ = long_len_;
          break;
        }
        write_session_row(o, row(uint32_t(next_)), f_);
        ++next_;
      }
      buf_ = o.str();
      if (buf_.empty() && long_left_ > 0) return underflow();
    }
    if (buf_.empty()) return traits_type::eof();
    setg(buf_.data(), buf_.data(), buf_.data() + buf_.size());
    return traits_type::to_int_type(buf_[0]);
  }

 private:
  uint64_t rows_, next_ = 0;
  SessionFileFormat f_;
  size_t long_at_, long_len_, long_left_ = 0;
  bool long_done_ = false;
  std::string buf_;
};

long max_rss_kb() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

}  // namespace

TEST_CASE("session file: huge inputs stream in constant memory", "[session_file]") {
  const long rss0 = max_rss_kb();
  struct Run {
    SessionFileFormat f;
    uint64_t rows;
  };
  for (const Run& run : {Run{SessionFileFormat::kCsv, 2000000}, Run{SessionFileFormat::kJsonl, 500000}}) {
    // A 64 MiB line in the middle: rejected, never buffered.
    GenBuf gb(run.rows, run.f, run.rows / 2, size_t(64) << 20);
    std::istream in(&gb);
    SessionFileReader rd(in, "huge");
    SessionRow r;
    uint64_t n = 0, rejected = 0;
    for (Next x; (x = rd.next(&r)) != Next::kEnd;) {
      if (x == Next::kRejected) {
        ++rejected;
        CHECK(rd.error().kind == Kind::kLineTooLong);
        continue;
      }
      REQUIRE(x == Next::kRow);
      if (!(r == row(uint32_t(n)))) FAIL("row " << n << " differs");
      ++n;
    }
    CHECK(n == run.rows);
    CHECK(rejected == 1);
  }
  // Reading 2.5M rows and a 64 MiB line grew the peak RSS by far less than
  // the input (~200 MB).
  CHECK(max_rss_kb() - rss0 < 16 * 1024);
}

TEST_CASE("session file: numbers are decimal or 0x hex, never octal (sb-ctl's flags too)", "[session_file]") {
  uint64_t v = 0;
  bool over = false;
  CHECK((parse_number("0443", &v, &over) && !over && v == 443));
  CHECK((parse_number("010", &v, &over) && v == 10));
  CHECK((parse_number("0x1F", &v, &over) && v == 31));
  CHECK((parse_number("18446744073709551615", &v, &over) && !over && v == ~uint64_t(0)));
  CHECK((parse_number("18446744073709551616", &v, &over) && over));
  for (const char* bad : {"", "-1", "+1", " 1", "1 ", "0x", "1e3", "0b1", "08x", "0o7"})
    CHECK_FALSE(parse_number(bad, &v, &over));
}

TEST_CASE("session file: a directory is refused at open, naming the path", "[session_file]") {
  char t[] = "/tmp/sb-session-file-test-XXXXXX";
  REQUIRE(::mkdtemp(t) != nullptr);
  const std::string dir = t;
  auto r = SessionFileReader::open(dir);
  CHECK_FALSE(r.ok());
  if (!r.ok()) CHECK(r.status().message() == dir + ": is a directory, not a session file");
  ::rmdir(t);
}
