// Shared by the native accept/advance tests (host: test_speculative_accept.cc, CUDA:
// test_speculative_accept.cu): a random step's inputs in plain vectors, and a reference written from
// the rule in kernels/speculative_accept.h, independently of the kernel's own code.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/speculative_accept.h"

namespace spec_test {

struct Step {
  int64_t n = 0, k = 0, max_new = 0, slots = 0, capacity = 0, eos = -1, pad = 0;
  int64_t t_adv = 1, d_adv = 0;
  std::vector<int64_t> draft, target, out_ids, next_tokens;
  std::vector<int32_t> slot_ids, tlen, dlen, out_len, finished, accepted;

  // Points a params struct at this step's vectors (the host kernel's inputs).
  pvt::SpeculativeAcceptParams params() {
    pvt::SpeculativeAcceptParams p;
    p.batch = n;
    p.num_draft = k;
    p.draft_tokens = draft.data();
    p.target_tokens = target.data();
    p.slot_ids = slot_ids.data();
    p.target_seqlens = tlen.data();
    p.target_num_slots = slots;
    p.target_capacity = capacity;
    p.target_advance = t_adv;
    p.draft_seqlens = dlen.data();
    p.draft_num_slots = slots;
    p.draft_capacity = capacity;
    p.draft_advance = d_adv;
    p.out_ids = out_ids.data();
    p.out_len = out_len.data();
    p.finished = finished.data();
    p.max_new_tokens = max_new;
    p.eos_token_id = eos;
    p.pad_token_id = pad;
    p.accepted = accepted.data();
    p.next_tokens = next_tokens.data();
    return p;
  }
  bool operator==(const Step& o) const {
    return draft == o.draft && target == o.target && out_ids == o.out_ids && next_tokens == o.next_tokens &&
           slot_ids == o.slot_ids && tlen == o.tlen && dlen == o.dlen && out_len == o.out_len &&
           finished == o.finished && accepted == o.accepted;
  }
};

// n sequences in distinct random slots, each disagreeing first at a random position (or never).
inline Step random_step(std::mt19937_64& rng, int64_t n, int64_t k, int64_t max_new, int64_t vocab, int64_t slots) {
  Step s;
  s.n = n; s.k = k; s.max_new = max_new; s.slots = slots; s.capacity = 1 << 20; s.d_adv = -k; s.pad = vocab;
  s.eos = (rng() % 3 == 0) ? static_cast<int64_t>(rng() % vocab) : -1;
  std::vector<int32_t> perm(slots);
  for (int64_t i = 0; i < slots; ++i) perm[i] = static_cast<int32_t>(i);
  std::shuffle(perm.begin(), perm.end(), rng);
  s.slot_ids.assign(perm.begin(), perm.begin() + n);
  s.target.resize(n * (k + 1));
  s.draft.resize(n * k);
  for (auto& t : s.target) t = static_cast<int64_t>(rng() % vocab);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t first_bad = static_cast<int64_t>(rng() % (k + 1));
    for (int64_t j = 0; j < k; ++j) {
      const int64_t t = s.target[i * (k + 1) + j];
      s.draft[i * k + j] = j < first_bad ? t : (j == first_bad || rng() % 2) ? (t + 1) % vocab : t;
    }
  }
  s.tlen.resize(slots);
  s.dlen.resize(slots);
  for (int64_t i = 0; i < slots; ++i) {
    s.tlen[i] = static_cast<int32_t>(k + 2 + rng() % 1000);
    s.dlen[i] = static_cast<int32_t>(s.tlen[i] + k);
  }
  s.out_len.resize(n);
  s.finished.resize(n);
  s.out_ids.assign(n * max_new, 0);
  for (int64_t i = 0; i < n; ++i) {
    s.out_len[i] = static_cast<int32_t>(rng() % max_new);
    s.finished[i] = rng() % 5 == 0;
    for (int64_t j = 0; j < s.out_len[i]; ++j) s.out_ids[i * max_new + j] = static_cast<int64_t>(rng() % vocab);
  }
  s.accepted.assign(n, -7);
  s.next_tokens.assign(n, -7);
  return s;
}

// The rule, sequence by sequence.
inline void reference(Step& s) {
  for (int64_t i = 0; i < s.n; ++i) {
    // A row the kernels refuse (slot outside the caches, out_len outside [0, max_new]) has no
    // reference result: the bad-input tests expect it unchanged and reset it themselves.
    if (s.slot_ids[i] < 0 || s.slot_ids[i] >= s.slots || s.out_len[i] < 0 || s.out_len[i] > s.max_new) continue;
    if (s.finished[i]) {
      s.accepted[i] = 0;
      s.next_tokens[i] = s.pad;
      continue;
    }
    int64_t a = 0;
    while (a < s.k && s.draft[i * s.k + a] == s.target[i * (s.k + 1) + a]) ++a;
    std::vector<int64_t> emit(s.target.begin() + i * (s.k + 1), s.target.begin() + i * (s.k + 1) + a + 1);
    for (size_t j = 0; j < emit.size(); ++j) {
      if (emit[j] == s.eos) {
        emit.resize(j + 1);
        s.finished[i] = 1;
        break;
      }
    }
    const int64_t room = s.max_new - s.out_len[i];
    if (static_cast<int64_t>(emit.size()) > room) emit.resize(room);
    for (int64_t t : emit) s.out_ids[i * s.max_new + s.out_len[i]++] = t;
    if (s.out_len[i] == s.max_new) s.finished[i] = 1;
    s.tlen[s.slot_ids[i]] += static_cast<int32_t>(a + s.t_adv);
    s.dlen[s.slot_ids[i]] += static_cast<int32_t>(a + s.d_adv);
    s.accepted[i] = static_cast<int32_t>(a);
    s.next_tokens[i] = s.target[i * (s.k + 1) + a];
  }
}

}  // namespace spec_test
