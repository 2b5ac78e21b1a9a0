// C entry points of unmapped reads as zeros (issue 30 point 4, Backend::set_zero_granule,
// core/zero_cover.h): the zero cover's largest run for reservations made from now on (0: none).
// Python: paddle_vtensor/zero_reads.py. Devices as c_api.cc takes them (kind 0: the host, 1: GPU
// `index`).
#include <cstdint>
#include <string>

#include "../core/apis.h"
#include "slot_c_api_support.h"

using pvt::c_api::report;

namespace {

pvt::Status backend_of(int kind, int index, pvt::Backend** backend) {
  const pvt::Device device = kind == 1 ? pvt::Device::cuda(index) : pvt::Device::host();
  PVT_RETURN_IF_ERROR(pvt::check_device_usable(device));
  return pvt::get_backend(device, backend);
}

}  // namespace

extern "C" {

int pvt_set_zero_reads(int kind, int index, int64_t granule, char* err, int64_t err_len) {
  if (granule < 0) {
    return report(pvt::Status(pvt::Code::kInvalidArgument,
                              "the zero cover's granule must be >= 0 bytes (0: off), got " + std::to_string(granule)),
                  err, err_len);
  }
  pvt::Backend* backend = nullptr;
  const pvt::Status found = backend_of(kind, index, &backend);
  if (!found.ok()) return report(found, err, err_len);
  return report(backend->set_zero_granule(static_cast<size_t>(granule)), err, err_len);
}

// The granule in effect (the host: 0, its reservation reads zeros without a cover); -1 when the
// device cannot be used.
int64_t pvt_zero_reads(int kind, int index) {
  pvt::Backend* backend = nullptr;
  return backend_of(kind, index, &backend).ok() ? static_cast<int64_t>(backend->zero_granule()) : -1;
}

}  // extern "C"
