#include "control/validate.h"
#include "control/convert.h"

#include <catch2/catch.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <functional>

using namespace sb;
using namespace sb::control;

static ValidationContext ctx() {
  ValidationContext c;
  c.partitions = 16;
  c.member_mask = 0xf;
  return c;
}

static pb::Envelope add_req(uint32_t node) {
  pb::Envelope e;
  e.set_version(1);
  auto* op = e.mutable_session_request()->add_ops();
  op->set_kind(pb::ADD);
  op->set_request_id(7);
  set_key(op->mutable_session()->mutable_key(), FlowKey::five_tuple(1, 2, 3, 4, 6));
  op->mutable_session()->set_node(node);
  return e;
}

static std::string why(const pb::Envelope& e) { return validate(e, ctx()).message(); }

TEST_CASE("validate: session requests") {
  CHECK(validate(add_req(2), ctx()).ok());
  CHECK(why(add_req(9)).find("ops[0].session.node") != std::string::npos);
  pb::Envelope e = add_req(1);
  e.mutable_session_request()->mutable_ops(0)->mutable_session()->clear_key();
  CHECK(why(e).find("ops[0].session.key: missing") != std::string::npos);
  e = add_req(1);
  e.mutable_session_request()->mutable_ops(0)->mutable_session()->mutable_key()->set_hi(1ULL << 60);
  CHECK(why(e).find("padding") != std::string::npos);
  e = add_req(1);
  e.mutable_session_request()->mutable_ops(0)->set_request_id(0);
  CHECK(why(e).find("request_id") != std::string::npos);
  e = add_req(1);
  e.set_version(2);
  CHECK(why(e).find("version") != std::string::npos);
  e = add_req(1);
  e.mutable_session_request()->mutable_ops(0)->set_kind(static_cast<pb::OpKind>(77));
  CHECK(why(e).find("kind") != std::string::npos);
  e = add_req(1);
  e.mutable_session_request()->mutable_ops(0)->mutable_session()->set_bearer(16);
  CHECK(why(e).find("bearer") != std::string::npos);
  pb::Envelope empty;
  empty.set_version(1);
  CHECK(why(empty).find("body") != std::string::npos);
}

TEST_CASE("validate: a modify names what it changes, ue-ip clusters take UE keys only") {
  pb::Envelope e = add_req(1);
  auto* op = e.mutable_session_request()->mutable_ops(0);
  op->set_kind(pb::MODIFY);
  CHECK(why(e).find("a modify sets at least one of teid_dl, enb_ip, bearer") != std::string::npos);
  op->mutable_session()->set_teid_dl(0);  // explicitly 0 is a value
  CHECK(validate(e, ctx()).ok());

  ValidationContext ue = ctx();
  ue.ue_ip_keys = true;
  CHECK(validate(add_req(1), ctx()).ok());
  CHECK(validate(add_req(1), ue).message().find("key_mode is ue-ip") != std::string::npos);
  pb::Envelope u = add_req(1);
  set_key(u.mutable_session_request()->mutable_ops(0)->mutable_session()->mutable_key(),
          FlowKey::ue_ipv4(0xC6120001));
  CHECK(validate(u, ue).ok());
}

TEST_CASE("validate: a FIB ack may be as big as the reconciling update it answers") {
  pb::Envelope e;
  e.set_version(1);
  auto* a = e.mutable_fib_ack();
  a->set_node(1);
  a->set_batch_id(5);
  for (int i = 0; i < 70000; ++i) {
    a->add_install_code(pb::OK);
    a->add_teid_ul(uint32_t(i));
  }
  CHECK(validate(e, ctx()).ok());
  a->add_install_code(pb::OK);  // codes and teids must pair up
  CHECK(why(e).find("differ in length") != std::string::npos);
}

TEST_CASE("validate: deltas and reports and sizes and garbage frames") {
  pb::Envelope e;
  e.set_version(1);
  auto* b = e.mutable_delta_batch();
  b->set_owner(1);
  auto* d = b->add_deltas();
  d->set_partition(3);
  d->set_epoch(1);
  d->set_seq(1);
  d->set_delta(std::string(100, 'x'));
  CHECK(validate(e, ctx()).ok());
  d->set_partition(16);
  CHECK(why(e).find("partition") != std::string::npos);
  d->set_partition(3);
  d->set_epoch(0);
  CHECK(why(e).find("epoch") != std::string::npos);
  d->set_epoch(1);
  d->set_delta(std::string(2u << 20, 'x'));
  CHECK(why(e).find("over the limit") != std::string::npos);

  // Oversized frames are refused before parsing; garbage is kCorrupt.
  ValidationContext c = ctx();
  c.limits.max_frame_bytes = 64;
  std::vector<uint8_t> big(65, 0);
  pb::Envelope out;
  CHECK(parse_envelope(big, c, &out).code() == StatusCode::kInvalidArgument);
  std::vector<uint8_t> garbage = {0xff, 0xff, 0xff, 0xff, 0x0f};
  CHECK(parse_envelope(garbage, ctx(), &out).code() == StatusCode::kCorrupt);
  // A good frame round-trips.
  std::string wire = add_req(3).SerializeAsString();
  CHECK(parse_envelope({reinterpret_cast<const uint8_t*>(wire.data()), wire.size()}, ctx(), &out).ok());
  CHECK(out.session_request().ops(0).session().node() == 3);
}

TEST_CASE("validate: a client's weights name members, a member's list may name other node ids (member list changes)") {
  auto list = [](google::protobuf::RepeatedPtrField<pb::NodeWeight>* ws, std::vector<std::pair<uint32_t, double>> v) {
    ws->Clear();
    for (const auto& [n, w] : v) {
      auto* x = ws->Add();
      x->set_node(n);
      x->set_weight(w);
    }
  };
  pb::Envelope req;
  req.set_version(1);
  req.mutable_weights_request()->set_set(true);
  list(req.mutable_weights_request()->mutable_weights(), {{1, 2}});
  CHECK(validate(req, ctx()).ok());
  list(req.mutable_weights_request()->mutable_weights(), {{1, 2}, {5, 1}});  // 5: not a member
  CHECK(why(req).find("unknown node 5") != std::string::npos);
  pb::Envelope up;
  up.set_version(1);
  up.mutable_weights_update()->set_from(0);
  up.mutable_weights_update()->set_version(3);
  list(up.mutable_weights_update()->mutable_weights(), {{0, 1}, {5, 1}});
  CHECK(validate(up, ctx()).ok());
  list(up.mutable_weights_update()->mutable_weights(), {{0, 1}, {32, 1}});
  CHECK(why(up).find("unknown node 32") != std::string::npos);
  list(up.mutable_weights_update()->mutable_weights(), {{5, 1}, {5, 1}});
  CHECK(why(up).find("listed twice") != std::string::npos);
  pb::Envelope rep;
  rep.set_version(1);
  rep.mutable_weights_reply()->set_code(pb::OK);
  rep.mutable_weights_reply()->set_version(3);
  list(rep.mutable_weights_reply()->mutable_weights(), {{0, 1}, {5, 1}});
  CHECK(validate(rep, ctx()).ok());
}

TEST_CASE("validate: random bytes never crash the parser") {
  uint64_t x = 12345;
  pb::Envelope out;
  std::string wire = add_req(3).SerializeAsString();
  for (int round = 0; round < 20000; ++round) {
    std::vector<uint8_t> f(wire.begin(), wire.end());
    for (int j = 0; j < 3; ++j) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      f[(x >> 33) % f.size()] ^= uint8_t(x >> 20);
    }
    (void)parse_envelope(f, ctx(), &out);
  }
  SUCCEED();
}

TEST_CASE("validate: a client never sets teid_ul (the handling node allocates it)") {
  for (const pb::OpKind kind : {pb::ADD, pb::MODIFY, pb::MOVE, pb::DELETE, pb::SHOW}) {
    INFO(pb::OpKind_Name(kind));
    pb::Envelope e = add_req(1);
    auto* op = e.mutable_session_request()->mutable_ops(0);
    op->set_kind(kind);
    op->mutable_session()->set_teid_dl(9);
    CHECK(validate(e, ctx()).ok());
    // An uplink TEID a client made up (or copied from another session): it
    // would be ignored, and the client told OK.
    op->mutable_session()->set_teid_ul(0x01000005);
    CHECK(why(e).find("ops[0].session.teid_ul: allocated by the handling node") != std::string::npos);
  }
}

TEST_CASE("convert: a FIB entry's teid_ul survives the protobuf round trip (0: unknown)", "[convert]") {
  rib::FibEntry e{FlowKey::five_tuple(0x0a000001u, 0x08080808u, 1000, 443, 6), 3, 0x1234, 0xc6120001u, 5,
                  3u << 27 | 77u};
  pb::FibEntry m;
  to_pb(e, &m);
  rib::FibEntry back = from_pb(m);
  CHECK(back.key == e.key);
  CHECK(back.handling_node == 3);
  CHECK(back.teid_dl == 0x1234);
  CHECK(back.enb_ip == 0xc6120001u);
  CHECK(back.bearer == 5);
  CHECK(back.teid_ul == (3u << 27 | 77u));
  e.teid_ul = 0;
  pb::FibEntry m0;
  to_pb(e, &m0);
  CHECK(from_pb(m0).teid_ul == 0);
}

TEST_CASE("validate: utf8_valid follows RFC 3629") {
  for (const char* ok : {"", "ready", "caf\xc3\xa9", "\xe2\x82\xac 5", "\xf0\x9f\x93\xa1", "\xf4\x8f\xbf\xbf"}) {
    INFO(ok);
    CHECK(utf8_valid(ok));
  }
  for (const char* bad : {"\xff", "\x80", "a\xc3", "\xe2\x82", "\xc0\x80", "\xe0\x80\xaf", "\xed\xa0\x80",
                          "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xc3\x28"}) {
    INFO(bad);
    CHECK_FALSE(utf8_valid(bad));
  }
}

TEST_CASE("validate: a text that is not UTF-8 is refused naming the field, and nothing is logged") {
  // libprotobuf logs an ERROR line for every `string` field with bad UTF-8
  // it parses: any peer or client could fill a node's log. The text
  // fields are `bytes` (the same wire encoding) and validate() refuses
  // them itself.
  using Fill = std::function<void(pb::Envelope&, const std::string&)>;
  const std::pair<const char*, Fill> cases[] = {
      {"error.text", [](pb::Envelope& e, const std::string& t) { e.mutable_error()->set_text(t); }},
      {"session_reply.results.text",
       [](pb::Envelope& e, const std::string& t) { e.mutable_session_reply()->add_results()->set_text(t); }},
      {"weights_reply.text", [](pb::Envelope& e, const std::string& t) { e.mutable_weights_reply()->set_text(t); }},
      {"stats.counters.name",
       [](pb::Envelope& e, const std::string& t) { e.mutable_stats()->add_counters()->set_name(t); }},
      {"status.cluster", [](pb::Envelope& e, const std::string& t) { e.mutable_status()->set_cluster(t); }},
  };
  for (const auto& [field, fill] : cases) {
    INFO(field);
    auto parse = [&](const std::string& text, off_t* logged) {
      pb::Envelope e;
      e.set_version(1);
      fill(e, text);
      const std::string wire = e.SerializeAsString();
      // stderr goes to a file while the frame is parsed.
      char path[] = "/tmp/sb-validate-stderr-XXXXXX";
      const int fd = mkstemp(path);
      REQUIRE(fd >= 0);
      std::fflush(stderr);
      const int saved = dup(2);
      REQUIRE(dup2(fd, 2) == 2);
      pb::Envelope out;
      const Status st = parse_envelope({reinterpret_cast<const uint8_t*>(wire.data()), wire.size()}, ctx(), &out);
      std::fflush(stderr);
      dup2(saved, 2);
      close(saved);
      *logged = lseek(fd, 0, SEEK_END);
      close(fd);
      unlink(path);
      return st;
    };
    off_t logged = -1;
    const Status bad = parse("owner says \xff\xfe", &logged);
    CHECK(bad.code() == StatusCode::kInvalidArgument);
    CHECK(bad.message() == std::string(field) + ": not UTF-8");
    CHECK(logged == 0);
    CHECK(parse("owner says caf\xc3\xa9", &logged).ok());
  }
}

TEST_CASE("validate: a TEID report pairs keys with teid_ul, names a member, is bounded, and survives conversion") {
  rib::TeidReportMsg r;
  r.report_id = 9;
  r.node = 2;
  r.keys = {FlowKey::five_tuple(1, 2, 3, 4, 6), FlowKey::five_tuple(5, 6, 7, 8, 17)};
  r.teid_ul = {2u << 27 | 5u, 2u << 27 | 6u};
  pb::Envelope e;
  e.set_version(1);
  to_pb(r, e.mutable_teid_report());
  REQUIRE(validate(e, ctx()).ok());
  const rib::TeidReportMsg back = from_pb(e.teid_report());
  CHECK(back.report_id == 9);
  CHECK(back.node == 2);
  CHECK(back.keys == r.keys);
  CHECK(back.teid_ul == r.teid_ul);
  pb::Envelope bad = e;
  bad.mutable_teid_report()->add_teid_ul(7);
  CHECK(why(bad).find("differ in length") != std::string::npos);
  bad = e;
  bad.mutable_teid_report()->set_node(9);
  CHECK(why(bad).find("teid_report.node") != std::string::npos);
  bad = e;
  bad.mutable_teid_report()->mutable_key(1)->set_hi(uint64_t(1) << 50);
  CHECK(why(bad).find("teid_report.key[1]") != std::string::npos);
  bad = e;
  for (int i = 0; i < 65536; ++i) {
    set_key(bad.mutable_teid_report()->add_key(), FlowKey::five_tuple(uint32_t(i), 2, 3, 4, 6));
    bad.mutable_teid_report()->add_teid_ul(1);
  }
  CHECK(why(bad).find("too many") != std::string::npos);
  pb::Envelope a;
  a.set_version(1);
  a.mutable_teid_report_ack()->set_report_id(9);
  a.mutable_teid_report_ack()->set_owner(1);
  a.mutable_teid_report_ack()->add_retry(0);
  CHECK(validate(a, ctx()).ok());
  a.mutable_teid_report_ack()->set_owner(7);
  CHECK(why(a).find("teid_report_ack.owner") != std::string::npos);
}
