// Native test of prefix sharing between slots on the host backend (slot_share_checks.h): layout of
// aligned slots, share + append + copy-on-write + both release orders, refusals that change nothing,
// injected failures mid-share and mid-copy-on-write.
#include "slot_share_checks.h"

int main() {
  pvt_test::Report r;
  share_test::run_all<phys_test::HostMem>(r, pvt::Device::host(), 4096);
  share_test::run_all<phys_test::HostMem>(r, pvt::Device::host(), 64 * 1024);
  phys_test::check_end(r, pvt::Device::host());
  return r.finish();
}
