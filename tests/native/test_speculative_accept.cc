// Native host test of the accept/advance kernel (speculative_accept_cpu) against the reference in
// test_speculative_accept.h: random steps (batch 1..64, k 1..8, eos or none, finished sequences),
// then every bad input: the right status naming the sequence, and the step left untouched.
// Usage: test_speculative_accept. Prints PASS/FAIL lines and "N passed, M failed".
#include <algorithm>
#include <string>

#include "harness.h"
#include "test_speculative_accept.h"

using pvt_test::Report;

namespace {

void random_steps(Report& r) {
  std::mt19937_64 rng(7);
  int bad = 0;
  for (int iter = 0; iter < 500; ++iter) {
    const int64_t n = 1 + rng() % 64, k = 1 + rng() % 8, max_new = 1 + rng() % 20, vocab = 2 + rng() % 6;
    spec_test::Step got = spec_test::random_step(rng, n, k, max_new, vocab, n + rng() % 8);
    spec_test::Step want = got;
    spec_test::reference(want);
    const pvt::Status st = pvt::speculative_accept_cpu(got.params());
    if (!st.ok() || !(got == want)) ++bad;
  }
  r.eq(bad, 0, "host kernel == reference on 500 random steps");
}

template <typename F>
void expect_error(Report& r, const std::string& name, pvt::Code code, const std::string& needle, F spoil) {
  std::mt19937_64 rng(11);
  spec_test::Step s = spec_test::random_step(rng, 4, 3, 6, 5, 8);
  std::fill(s.finished.begin(), s.finished.end(), 0);
  spoil(s);
  const spec_test::Step before = s;
  const pvt::Status st = pvt::speculative_accept_cpu(s.params());
  r.code(st, code, name + ": status");
  r.check(st.message().find(needle) != std::string::npos, name + ": message", st.message());
  r.check(s == before, name + ": nothing changed");
}

}  // namespace

int main() {
  Report r;
  random_steps(r);
  using pvt::Code;
  expect_error(r, "slot past the cache", Code::kInvalidArgument, "sequence 2 (slot 8)", [](spec_test::Step& s) { s.slot_ids[2] = 8; });
  expect_error(r, "negative slot", Code::kInvalidArgument, "outside", [](spec_test::Step& s) { s.slot_ids[0] = -1; });
  expect_error(r, "repeated slot", Code::kInvalidArgument, "same slot", [](spec_test::Step& s) { s.slot_ids[3] = s.slot_ids[1]; });
  expect_error(r, "target length past capacity", Code::kOutOfRange, "target slot's new length",
               [](spec_test::Step& s) { s.capacity = s.tlen[s.slot_ids[0]]; });
  expect_error(r, "draft length below 0", Code::kOutOfRange, "draft slot's new length",
               [](spec_test::Step& s) { s.d_adv = -100000; });
  expect_error(r, "out_len past max_new", Code::kInvalidArgument, "out_len", [](spec_test::Step& s) { s.out_len[1] = 7; });
  expect_error(r, "k = 0", Code::kInvalidArgument, "k) must be >= 1", [](spec_test::Step& s) { s.k = 0; });
  {
    std::mt19937_64 rng(5);
    spec_test::Step s = spec_test::random_step(rng, 2, 2, 4, 5, 4);
    pvt::SpeculativeAcceptParams p = s.params();
    p.next_tokens = nullptr;
    r.code(pvt::speculative_accept_cpu(p), Code::kInvalidArgument, "null pointer: status");
  }
  return r.finish();
}
