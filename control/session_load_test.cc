// sb-ctl's session files end to end: `session gen` output read back by the
// shared reader (rib/session_file.h) in both formats, and `session load`
// against real sb-node processes while an owner is down and comes back
// (retries with backoff; request ids keep them idempotent).
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <map>
#include <set>
#include <thread>

#include "control/harness.h"
#include "core/test_util.h"
#include "rib/session_file.h"

using namespace sb;
using namespace sb::control;

namespace {

std::vector<rib::SessionRow> read_rows(const std::string& path, std::vector<uint64_t>* lines = nullptr) {
  auto rd = rib::SessionFileReader::open(path);
  REQUIRE(rd.ok());
  std::vector<rib::SessionRow> v;
  rib::SessionRow r;
  for (;;) {
    const auto n = rd.value()->next(&r);
    if (n == rib::SessionFileReader::Next::kEnd) break;
    INFO(rd.value()->error().message);
    REQUIRE(n == rib::SessionFileReader::Next::kRow);
    v.push_back(r);
    if (lines) lines->push_back(rd.value()->line());
  }
  return v;
}

std::string temp_dir() {
  char t[] = "/tmp/sb-load-test.XXXXXX";
  REQUIRE(::mkdtemp(t) != nullptr);
  return t;
}

uint64_t field(const std::string& out, const std::string& name) {
  const size_t p = out.find(name + " ");
  if (p == std::string::npos) return ~0ULL;
  return std::strtoull(out.c_str() + p + name.size() + 1, nullptr, 10);
}

// A cluster of `nodes` sb-node processes (control/harness.h); capacity 0
// keeps the harness's default.
std::unique_ptr<Harness> start_cluster(uint32_t nodes, uint32_t partitions, uint64_t capacity = 0,
                                       KeyMode key_mode = KeyMode::kFiveTuple) {
  HarnessOptions o;
  o.sb_node = SB_NODE_BIN;
  o.nodes = nodes;
  o.partitions = partitions;
  o.key_mode = key_mode;
  if (capacity != 0) o.capacity = o.fib_capacity = capacity;
  auto hr = Harness::start(o);
  INFO(hr.status().to_string());
  REQUIRE(hr.ok());
  return std::move(hr).value();
}

// "sb-ctl --config <node 0's config> --key <the client key> " for h.
std::string ctl_for(const Harness& h) {
  return std::string(SB_CTL_BIN) + " --config " + h.config_path(0) + " --key " + h.dir() + "/client.key ";
}

}  // namespace

TEST_CASE("sb-ctl session gen: its CSV and JSONL read back through the shared reader, row for row") {
  const std::string dir = temp_dir();
  const std::string ctl = SB_CTL_BIN;
  for (const std::string extra : {"--nodes 4", "--choose"}) {
    INFO(extra);
    REQUIRE(test::sh(ctl + " session gen --count 3000 --seed 9 " + extra + " --out " + dir + "/s.csv").rc == 0);
    REQUIRE(test::sh(ctl + " session gen --count 3000 --seed 9 " + extra + " --format jsonl --out " + dir + "/s.jsonl")
                .rc == 0);
    std::vector<uint64_t> lc, lj;
    const auto c = read_rows(dir + "/s.csv", &lc);
    const auto j = read_rows(dir + "/s.jsonl", &lj);
    REQUIRE(c.size() == 3000);
    REQUIRE(j.size() == 3000);
    std::set<std::pair<uint64_t, uint64_t>> keys;
    for (size_t i = 0; i < c.size(); ++i) {
      CHECK(c[i] == j[i]);
      CHECK(lc[i] == i + 2);  // after the header
      CHECK(lj[i] == i + 1);
      CHECK(c[i].choose == (extra == "--choose"));
      if (!c[i].choose) CHECK(c[i].node < 4);
      CHECK(c[i].bearer >= 5);
      keys.insert({c[i].key().lo(), c[i].key().hi()});
    }
    CHECK(keys.size() == c.size());
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("sb-ctl session gen --node-ids: rows pinned to exactly the listed members") {
  const std::string dir = temp_dir();
  const std::string ctl = SB_CTL_BIN;
  REQUIRE(test::sh(ctl + " session gen --count 2000 --node-ids 1,2,3,4 --out " + dir + "/s.csv").rc == 0);
  std::vector<uint64_t> lines;
  const auto rows = read_rows(dir + "/s.csv", &lines);
  REQUIRE(rows.size() == 2000);
  std::set<uint32_t> seen;
  for (const auto& r : rows) {
    CHECK_FALSE(r.choose);
    seen.insert(r.node);
  }
  CHECK(seen == std::set<uint32_t>{1, 2, 3, 4});
  for (const std::string bad : {"--node-ids 1,x", "--node-ids 32", "--node-ids ,", "--nodes 2 --node-ids 1,2"}) {
    INFO(bad);
    const test::Run r = test::sh(ctl + " session gen --count 10 " + bad + " --out " + dir + "/b.csv");
    CHECK(r.rc == 2);
    CHECK(test::has(r.out, "session gen: "));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("sb-ctl session load: an owner down during the load, its rows succeed once it is back, none lost or duplicated") {
  const std::unique_ptr<Harness> hp = start_cluster(3, 64, 200000);
  Harness& h = *hp;
  const std::string dir = h.dir();
  const std::string cli = ctl_for(h);
  const std::string file = dir + "/s.csv";
  const std::string ctl = SB_CTL_BIN;
  REQUIRE(test::sh(ctl + " session gen --count 3000 --nodes 3 --seed 4 --out " + file).rc == 0);
  // A few malformed rows: counted, never retried.
  {
    FILE* f = std::fopen(file.c_str(), "a");
    std::fputs("198.18.0.1,198.19.0.1,1,2,tcp,9,1,198.19.0.2,5\n", f);  // node 9 is not a member
    std::fputs("{\"src_ip\":1}\n", f);                                 // not CSV
    std::fclose(f);
  }
  // Node 2 owns a third of the partitions and handles a third of the rows.
  REQUIRE(h.kill9(2).ok());
  auto load = std::async(std::launch::async, [&] {
    // A small window (2 x 64 rows) so the rows waiting for node 2 fill it
    // and the load must go on through the retries alone.
    return test::sh(cli + "--via 0 --timeout 1000 session load " + file +
                    " --retries 14 --backoff 100 --backoff-max 1500 --window 2 --batch 64 --quiet");
  });
  std::this_thread::sleep_for(std::chrono::seconds(4));
  REQUIRE(h.restart(2).ok());
  const test::Run r = load.get();
  INFO(r.out);
  CHECK(r.rc == 1);  // the two malformed rows
  CHECK(field(r.out, "rows") == 3002);
  CHECK(field(r.out, "accepted") == 3000);
  CHECK(field(r.out, "rejected") == 0);
  CHECK(field(r.out, "malformed") == 2);
  CHECK(field(r.out, "failed") == 0);
  CHECK(field(r.out, "retried") > 0);
  CHECK(field(r.out, "retried") <= 3000);
  CHECK(test::has(r.out, "x retry: "));
  CHECK(test::has(r.out, "1 x malformed: bad node\n"));
  CHECK(test::has(r.out, "1 x malformed: bad CSV\n"));
  CHECK(test::has(r.out, "unknown node 9 (members: 0 1 2)"));
  // A header the reader refuses ends the load before anything is sent: exit 2.
  {
    FILE* f = std::fopen((dir + "/bad.csv").c_str(), "w");
    std::fputs("src_ip,dst_ip,src_port,dst_port,proto,node,teid,enb_ip,bearer\n", f);
    std::fclose(f);
    const test::Run b = test::sh(cli + "session load " + dir + "/bad.csv --quiet");
    INFO(b.out);
    CHECK(b.rc == 2);
    CHECK(test::has(b.out, "bad.csv:1: CSV header: unknown column 'teid'"));
    CHECK(field(b.out, "rows") == 0);
  }

  // Every session is there exactly once, with its handling node and TEID,
  // and the FIBs hold exactly one entry per session (scalebricks).
  auto cr = h.client();
  REQUIRE(cr.ok());
  Client& c = *cr.value();
  std::vector<rib::SessionRow> want;
  {
    rib::SessionFileOptions fo;
    fo.member_mask = 0b111;
    auto rd = rib::SessionFileReader::open(file, fo);
    REQUIRE(rd.ok());
    rib::SessionRow x;
    for (auto n = rd.value()->next(&x); n != rib::SessionFileReader::Next::kEnd; n = rd.value()->next(&x))
      if (n == rib::SessionFileReader::Next::kRow) want.push_back(x);
  }
  REQUIRE(want.size() == 3000);
  std::map<uint32_t, uint64_t> per_node;
  for (size_t i = 0; i < want.size(); i += 500) {
    pb::Envelope req;
    for (size_t k = i; k < std::min(want.size(), i + 500); ++k) {
      auto* op = req.mutable_session_request()->add_ops();
      op->set_kind(pb::SHOW);
      set_key(op->mutable_session()->mutable_key(), want[k].key());
    }
    auto rep = c.call(0, req, 10000);
    REQUIRE(rep.ok());
    REQUIRE(rep.value().has_session_reply());
    const auto& rs = rep.value().session_reply().results();
    REQUIRE(size_t(rs.size()) == std::min<size_t>(500, want.size() - i));
    for (int k = 0; k < rs.size(); ++k) {
      const auto& w = want[i + size_t(k)];
      INFO("row " << i + size_t(k) << " " << w.key().to_string() << ": " << rs[k].text());
      REQUIRE(rs[k].code() == pb::OK);
      CHECK(rs[k].session().node() == w.node);
      CHECK(rs[k].session().teid_dl() == w.teid_dl);
      CHECK(rs[k].session().enb_ip() == w.enb_ip);
      ++per_node[w.node];
    }
  }
  // RIB sizes and FIB entries converge to exactly one per session.
  std::string problem;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  do {
    problem.clear();
    uint64_t sessions = 0;
    for (const auto& m : h.spec().members) {
      pb::Envelope st;
      st.mutable_status_request();
      auto sr = c.call(m.id, st, 5000);
      if (!sr.ok()) { problem = "node " + std::to_string(m.id) + ": " + sr.status().message(); break; }
      sessions += sr.value().status().sessions();
      if (sr.value().status().fib_entries() != per_node[m.id])
        problem = "node " + std::to_string(m.id) + " has " + std::to_string(sr.value().status().fib_entries()) +
                  " FIB entries, want " + std::to_string(per_node[m.id]);
    }
    if (problem.empty() && sessions != 3000) problem = "RIBs hold " + std::to_string(sessions) + " sessions";
    if (!problem.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (!problem.empty() && std::chrono::steady_clock::now() < deadline);
  INFO(problem);
  CHECK(problem.empty());
}

TEST_CASE("sb-ctl cluster weights: shows the configuration's weights, changes them cluster-wide, rejects bad input") {
  const std::unique_ptr<Harness> hp = start_cluster(3, 16);
  const std::string ctl = ctl_for(*hp);
  test::Run r = test::sh(ctl + "--via 1 cluster weights");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(test::has(r.out, "weights version 0 (the configuration's): 0=1 1=1 2=1"));
  r = test::sh(ctl + "--via 1 cluster weights --set 0=1,2=3");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(test::has(r.out, "weights version 1: 0=1 1=1 2=3"));
  CHECK(test::has(r.out, "adopted by:"));
  // Every node uses the new version for new sessions (at once or from the
  // coordinator's heartbeats).
  for (uint32_t n = 0; n < 3; ++n) {
    bool seen = false;
    for (int t = 0; t < 50 && !seen; ++t) {
      r = test::sh(ctl + "--via " + std::to_string(n) + " cluster weights");
      seen = r.rc == 0 && test::has(r.out, "weights version 1: 0=1 1=1 2=3");
      if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    INFO("node " << n << ": " << r.out);
    CHECK(seen);
  }
  // Refused by the cluster (exit 1): negative, all zero, unknown member.
  for (const std::string bad : {"0=-1", "0=0,1=0,2=0", "7=1"}) {
    r = test::sh(ctl + "cluster weights --set " + bad);
    INFO(bad << ": " << r.out);
    CHECK(r.rc == 1);
  }
  // Usage errors (exit 2): not N=W, a node twice, not a number.
  for (const std::string bad : {"x", "0=1,0=2", "1=abc", "=1"}) {
    r = test::sh(ctl + "cluster weights --set " + bad);
    INFO(bad << ": " << r.out);
    CHECK(r.rc == 2);
  }
  // Nothing above changed the version.
  r = test::sh(ctl + "cluster weights");
  CHECK(test::has(r.out, "weights version 1: "));
}

TEST_CASE("key_mode ue-ip end to end: session load keys rows by their UE, 5-tuple keys are refused") {
  const std::unique_ptr<Harness> hp = start_cluster(3, 64, 0, KeyMode::kUeIpv4);
  Harness& h = *hp;
  const std::string cli = ctl_for(h);
  const std::string file = h.dir() + "/ue.csv";
  // 600 sessions, one per UE address (the row's destination), spread over
  // the three nodes; source and ports vary and must not matter.
  std::vector<rib::SessionRow> rows;
  {
    std::ofstream out(file);
    rib::write_session_csv_header(out);
    std::mt19937_64 rng(7);
    for (uint32_t i = 0; i < 600; ++i) {
      rib::SessionRow r;
      r.src_ip = 0xc6120000u + uint32_t(rng() % 65536);
      r.dst_ip = 0xc6130000u + i;
      r.src_port = uint16_t(1024 + rng() % 60000);
      r.dst_port = uint16_t(rng() % 65536);
      r.proto = 17;
      r.node = uint8_t(i % 3);
      r.teid_dl = 0x1000 + i;
      r.enb_ip = 0xc6130100u + (i % 7);
      r.bearer = 5;
      rib::write_session_row(out, r, rib::SessionFileFormat::kCsv);
      rows.push_back(r);
    }
    REQUIRE(out.good());
  }
  const test::Run r = test::sh(cli + "session load " + file + " --quiet");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(field(r.out, "accepted") == 600);
  CHECK(field(r.out, "rejected") == 0);

  auto cr = h.client();
  REQUIRE(cr.ok());
  Client& c = *cr.value();
  // Every session is found by its UE key, with its node and tunnel.
  pb::Envelope req;
  for (const auto& w : rows) {
    auto* op = req.mutable_session_request()->add_ops();
    op->set_kind(pb::SHOW);
    set_key(op->mutable_session()->mutable_key(), FlowKey::ue_ipv4(w.dst_ip));
  }
  auto rep = c.call(1, req, 10000);
  REQUIRE(rep.ok());
  REQUIRE(rep.value().has_session_reply());
  const auto& rs = rep.value().session_reply().results();
  REQUIRE(size_t(rs.size()) == rows.size());
  for (size_t k = 0; k < rows.size(); ++k) {
    INFO("row " << k << ": " << rs[int(k)].text());
    REQUIRE(rs[int(k)].code() == pb::OK);
    CHECK(rs[int(k)].session().node() == rows[k].node);
    CHECK(rs[int(k)].session().teid_dl() == rows[k].teid_dl);
    CHECK(rs[int(k)].session().enb_ip() == rows[k].enb_ip);
  }
  // A 5-tuple key is refused by the nodes (a client that bypasses sb-ctl)...
  {
    pb::Envelope add;
    auto* op = add.mutable_session_request()->add_ops();
    op->set_kind(pb::ADD);
    op->set_request_id(77);
    auto* x = op->mutable_session();
    set_key(x->mutable_key(), rows[0].key());
    x->set_node(0);
    x->set_teid_dl(1);
    x->set_enb_ip(0xc6130001u);
    x->set_bearer(5);
    auto ar = c.call(0, add, 10000);
    REQUIRE(ar.ok());
    INFO(ar.value().DebugString());
    REQUIRE(ar.value().has_error());  // refused as a whole by the validator
    CHECK(test::has(ar.value().error().text(), "key_mode is ue-ip"));
  }
  // ... and by sb-ctl before anything is sent.
  {
    const test::Run a = test::sh(cli + "session add --flow '198.18.0.1:1000>198.19.0.1:80/17' --node 0 "
                                       "--teid-dl 9 --enb 198.19.1.1");
    INFO(a.out);
    CHECK(a.rc == 2);
    CHECK(test::has(a.out, "key_mode is ue-ip"));
  }
  // The FIBs converge to one entry per session, on its handling node.
  std::string problem;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  do {
    problem.clear();
    for (const auto& m : h.spec().members) {
      pb::Envelope st;
      st.mutable_status_request();
      auto sr = c.call(m.id, st, 5000);
      if (!sr.ok()) { problem = "node " + std::to_string(m.id) + ": " + sr.status().message(); break; }
      if (sr.value().status().fib_entries() != 200)
        problem = "node " + std::to_string(m.id) + " has " + std::to_string(sr.value().status().fib_entries()) +
                  " FIB entries, want 200";
    }
    if (!problem.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (!problem.empty() && std::chrono::steady_clock::now() < deadline);
  INFO(problem);
  CHECK(problem.empty());
}

TEST_CASE("sb-ctl session load: rows the cluster refuses (a key twice in one file) are named by file and line") {
  const std::unique_ptr<Harness> hp = start_cluster(2, 16);
  const std::string cli = ctl_for(*hp);
  const std::string file = hp->dir() + "/dup.csv";
  {
    std::ofstream out(file);
    rib::write_session_csv_header(out);
    for (uint32_t i = 0; i < 30; ++i) {
      rib::SessionRow r;
      r.src_ip = 0xc6120001u;
      r.dst_ip = 0xc6130000u + (i < 15 ? i : i - 15);  // rows 16..30 (lines 17..31) repeat rows 1..15's keys
      r.src_port = 1000;
      r.dst_port = 80;
      r.proto = 6;
      r.node = uint8_t(i % 2);
      r.teid_dl = 0x100 + i;
      r.enb_ip = 0xc6130101u;
      r.bearer = 5;
      rib::write_session_row(out, r, rib::SessionFileFormat::kCsv);
    }
    REQUIRE(out.good());
  }
  // One row per batch: the copies reach the owner after their first rows.
  const test::Run r = test::sh(cli + "session load " + file + " --batch 1 --window 1 --quiet");
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK(test::has(r.out, "rows 30 accepted 15 rejected 15 malformed 0 failed 0"));
  for (int line = 17; line <= 31; ++line) {
    INFO("line " << line);
    CHECK(test::has(r.out, file + ":" + std::to_string(line) + ": ALREADY_EXISTS: duplicate add of "));
  }
}
