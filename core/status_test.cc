#include "core/status.h"

#include <catch2/catch.hpp>

using namespace sb;

TEST_CASE("status codes, messages and results", "[status]") {
  Status ok;
  CHECK(ok.ok());
  CHECK(ok.to_string() == "ok");
  Status e = Status::InvalidArgument("--keys: bad size suffix 'Q'");
  CHECK_FALSE(e.ok());
  CHECK(e.code() == StatusCode::kInvalidArgument);
  CHECK(e.to_string() == "invalid_argument: --keys: bad size suffix 'Q'");
  CHECK(e.with_context("sb-bench").message() == "sb-bench: --keys: bad size suffix 'Q'");
  Result<int> r = 5;
  CHECK(r.ok());
  CHECK(r.value() == 5);
  Result<int> f = Status::NotFound("x");
  CHECK_FALSE(f.ok());
  CHECK(f.status().code() == StatusCode::kNotFound);
  auto fn = [](bool fail) -> Status {
    SB_RETURN_IF_ERROR(fail ? Status::Io("disk") : Status::Ok());
    return Status::Internal("reached");
  };
  CHECK(fn(true).code() == StatusCode::kIo);
  CHECK(fn(false).code() == StatusCode::kInternal);
}
