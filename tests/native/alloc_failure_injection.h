// Host-allocation failure injection for the native tests: replaces the program's global operator
// new so that, while g_fail_after >= 0, the allocation that takes it to -1 throws std::bad_alloc
// (as a real out-of-memory would). Include it in exactly one source file of a test program.
#pragma once

#include <cstdlib>
#include <new>

static long g_fail_after = -1;

void* operator new(size_t n) {
  if (g_fail_after >= 0 && g_fail_after-- == 0) throw std::bad_alloc();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
