#include "tools/gen/report.h"

#include <cstdlib>
#include <map>
#include <vector>

#include "tools/gen/sessions.h"

namespace sb::gen {

Report merge(const SendSummary& s, const SinkSummary& k) {
  Report r;
  r.run_id = s.run_id;
  r.sessions = s.sessions;
  r.sent = s.sent;
  r.unknown_sent = s.unknown_sent;
  r.tx_failed = s.tx_failed;
  r.duration_s = s.duration_s;
  r.rate_pps = s.rate_pps;
  r.delivered = k.delivered;
  r.delivered_correct = k.delivered_correct;
  r.misdelivered = k.misdelivered;
  r.duplicates = k.duplicates;
  r.unknown_delivered = k.unknown_delivered;
  r.other_run = k.other_run;
  const uint64_t known_sent = s.sent >= s.unknown_sent ? s.sent - s.unknown_sent : 0;
  r.run_id_match = !k.run_id_known || k.run_id == s.run_id;
  if (r.run_id_match) {
    r.lost = int64_t(known_sent) - int64_t(k.delivered);
    r.delivered_correct_fraction = known_sent ? double(k.delivered_correct) / double(known_sent) : 0.0;
  }
  r.clock_shared = !s.boot_id.empty() && s.boot_id == k.boot_id;
  if (r.clock_shared && k.latency_samples > 0) {
    r.latency_us_p50 = k.latency_us_p50;
    r.latency_us_p99 = k.latency_us_p99;
  }
  r.echo_requests = k.echo_requests;
  r.echo_responses = k.echo_responses;
  r.echo_responses_unmatched = k.echo_responses_unmatched;
  r.upstream_sent = k.upstream_sent;
  r.upstream_received = s.upstream_received;
  r.upstream_foreign_run = s.upstream_foreign_run;
  return r;
}

namespace {

using Fields = std::map<std::string, std::string>;

Status fields_of(const std::string& text, const char* what, Fields* f) {
  std::vector<std::pair<std::string, std::string>> v;
  Status st = parse_json_object(text, &v);
  if (!st.ok()) return st.with_context(what);
  for (auto& [a, b] : v) (*f)[a] = b;
  return Status::Ok();
}

Status need_u(const Fields& f, const char* what, const char* k, uint64_t* v) {
  auto it = f.find(k);
  if (it == f.end()) return Status::InvalidArgument(std::string(what) + ": missing \"" + k + "\"");
  Result<uint64_t> r = parse_uint(it->second, ~0ULL);
  if (!r.ok()) return r.status().with_context(std::string(what) + ": \"" + k + "\"");
  *v = r.value();
  return Status::Ok();
}

Status need_d(const Fields& f, const char* what, const char* k, double* v) {
  auto it = f.find(k);
  if (it == f.end()) return Status::InvalidArgument(std::string(what) + ": missing \"" + k + "\"");
  char* end = nullptr;
  *v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0')
    return Status::InvalidArgument(std::string(what) + ": \"" + k + "\": not a number");
  return Status::Ok();
}

void opt_u(const Fields& f, const char* k, uint64_t* v) {
  auto it = f.find(k);
  if (it == f.end()) return;
  Result<uint64_t> r = parse_uint(it->second, ~0ULL);
  if (r.ok()) *v = r.value();
}

std::string opt_s(const Fields& f, const char* k) {
  auto it = f.find(k);
  return it == f.end() ? "" : it->second;
}

}  // namespace

Status read_send_json(const std::string& text, SendSummary* s) {
  Fields f;
  const char* w = "send.json";
  SB_RETURN_IF_ERROR(fields_of(text, w, &f));
  if (opt_s(f, "mode") != "send") return Status::InvalidArgument("send.json: not an `sb-gen send` output (mode)");
  SB_RETURN_IF_ERROR(need_u(f, w, "run_id", &s->run_id));
  SB_RETURN_IF_ERROR(need_u(f, w, "sent", &s->sent));
  SB_RETURN_IF_ERROR(need_u(f, w, "unknown_sent", &s->unknown_sent));
  SB_RETURN_IF_ERROR(need_u(f, w, "sessions", &s->sessions));
  SB_RETURN_IF_ERROR(need_d(f, w, "duration_s", &s->duration_s));
  SB_RETURN_IF_ERROR(need_d(f, w, "rate_pps", &s->rate_pps));
  opt_u(f, "tx_failed", &s->tx_failed);
  s->boot_id = opt_s(f, "boot_id");
  if (f.count("upstream_received")) {
    uint64_t v = 0;
    SB_RETURN_IF_ERROR(need_u(f, w, "upstream_received", &v));
    s->upstream_received = v;
  }
  if (f.count("upstream_foreign_run")) {
    uint64_t v = 0;
    SB_RETURN_IF_ERROR(need_u(f, w, "upstream_foreign_run", &v));
    s->upstream_foreign_run = v;
  }
  return Status::Ok();
}

Status read_sink_json(const std::string& text, SinkSummary* k) {
  Fields f;
  const char* w = "sink.json";
  SB_RETURN_IF_ERROR(fields_of(text, w, &f));
  if (opt_s(f, "mode") != "sink") return Status::InvalidArgument("sink.json: not an `sb-gen sink` output (mode)");
  SB_RETURN_IF_ERROR(need_u(f, w, "delivered", &k->delivered));
  SB_RETURN_IF_ERROR(need_u(f, w, "delivered_correct", &k->delivered_correct));
  SB_RETURN_IF_ERROR(need_u(f, w, "misdelivered", &k->misdelivered));
  SB_RETURN_IF_ERROR(need_u(f, w, "duplicates", &k->duplicates));
  SB_RETURN_IF_ERROR(need_u(f, w, "unknown_delivered", &k->unknown_delivered));
  opt_u(f, "received", &k->received);
  opt_u(f, "other_run", &k->other_run);
  opt_u(f, "echo_requests", &k->echo_requests);
  opt_u(f, "echo_responses", &k->echo_responses);
  opt_u(f, "echo_responses_unmatched", &k->echo_responses_unmatched);
  opt_u(f, "upstream_sent", &k->upstream_sent);
  opt_u(f, "latency_samples", &k->latency_samples);
  k->boot_id = opt_s(f, "boot_id");
  if (f.count("run_id")) {
    SB_RETURN_IF_ERROR(need_u(f, w, "run_id", &k->run_id));
    k->run_id_known = true;
  }
  if (f.count("latency_us_p50") && f.count("latency_us_p99")) {
    double a, b;
    SB_RETURN_IF_ERROR(need_d(f, w, "latency_us_p50", &a));
    SB_RETURN_IF_ERROR(need_d(f, w, "latency_us_p99", &b));
    k->latency_us_p50 = a;
    k->latency_us_p99 = b;
  }
  return Status::Ok();
}

std::string report_json(const Report& r) {
  JsonWriter j;
  j.u("run_id", r.run_id).u("sessions", r.sessions);
  j.u("sent", r.sent).u("delivered", r.delivered).u("delivered_correct", r.delivered_correct);
  j.u("misdelivered", r.misdelivered);
  if (r.lost) j.i("lost", *r.lost);
  j.u("duplicates", r.duplicates);
  j.u("unknown_sent", r.unknown_sent).u("unknown_delivered", r.unknown_delivered);
  j.d("duration_s", r.duration_s).d("rate_pps", r.rate_pps, 1);
  if (r.run_id_match) j.g("delivered_correct_fraction", r.delivered_correct_fraction);
  if (r.latency_us_p50) j.d("latency_us_p50", *r.latency_us_p50, 1);
  if (r.latency_us_p99) j.d("latency_us_p99", *r.latency_us_p99, 1);
  j.u("tx_failed", r.tx_failed).u("other_run", r.other_run).b("run_id_match", r.run_id_match);
  j.b("clock_shared", r.clock_shared);
  j.u("echo_requests", r.echo_requests).u("echo_responses", r.echo_responses);
  j.u("echo_responses_unmatched", r.echo_responses_unmatched);
  j.u("upstream_sent", r.upstream_sent);
  if (r.upstream_received) j.u("upstream_received", *r.upstream_received);
  if (r.upstream_foreign_run) j.u("upstream_foreign_run", *r.upstream_foreign_run);
  return j.str();
}

std::string report_table(const Report& r) {
  std::string o;
  char b[160];
  auto line = [&](const char* k, const std::string& v) {
    std::snprintf(b, sizeof b, "  %-28s %s\n", k, v.c_str());
    o += b;
  };
  auto pct = [](uint64_t a, uint64_t n) {
    char t[64];
    std::snprintf(t, sizeof t, "%llu (%.4f%%)", (unsigned long long)a, n ? 100.0 * double(a) / double(n) : 0.0);
    return std::string(t);
  };
  const uint64_t known = r.sent - r.unknown_sent;
  std::snprintf(b, sizeof b, "sb-gen report: run %llu, %llu sessions, %.2f s at %.0f pps\n",
                (unsigned long long)r.run_id, (unsigned long long)r.sessions, r.duration_s, r.rate_pps);
  o += b;
  line("sent (known + unknown)", std::to_string(r.sent) + " (" + std::to_string(known) + " + " +
                                     std::to_string(r.unknown_sent) + ")");
  line("delivered", pct(r.delivered, known));
  line("delivered_correct", pct(r.delivered_correct, known));
  line("misdelivered", pct(r.misdelivered, known));
  line("lost", r.lost ? std::to_string(*r.lost) : std::string("- (the sink counted another run)"));
  line("duplicates", std::to_string(r.duplicates));
  line("unknown_delivered", pct(r.unknown_delivered, r.unknown_sent));
  if (r.latency_us_p50) {
    std::snprintf(b, sizeof b, "%.1f / %.1f", *r.latency_us_p50, *r.latency_us_p99);
    line("latency p50 / p99 (us)", b);
  } else {
    line("latency", r.clock_shared ? "no samples" : "not measured (different clocks)");
  }
  line("echo requests / responses", std::to_string(r.echo_requests) + " / " + std::to_string(r.echo_responses) +
                                        " (" + std::to_string(r.echo_responses_unmatched) + " unmatched)");
  if (r.upstream_sent || r.upstream_received)
    line("upstream sent / received", std::to_string(r.upstream_sent) + " / " +
                                         (r.upstream_received ? std::to_string(*r.upstream_received) : "-"));
  if (r.upstream_foreign_run && *r.upstream_foreign_run)
    line("upstream of other runs", std::to_string(*r.upstream_foreign_run) + " (not in received)");
  if (!r.run_id_match) o += "  WARNING: the sink saw a different run id than the generator sent\n";
  if (r.tx_failed) o += "  note: " + std::to_string(r.tx_failed) + " packets the ports refused (not in sent)\n";
  return o;
}

}  // namespace sb::gen
