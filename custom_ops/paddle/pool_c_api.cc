// C entry points of the chunk pool (issue 30 point 1, core/chunk_pool.h): its bound per device,
// trimming it, filling it ahead; and collecting the deferred unmaps of released slots (point 3). Python: paddle_vtensor/pool.py. Devices as c_api.cc takes them
// (kind 0: the host, 1: GPU `index`); errors reported as the slot entry points report them.
#include <cstdint>
#include <string>

#include "../core/apis.h"
#include "slot_c_api_support.h"

using pvt::c_api::report;

namespace {

pvt::Device device_of(int kind, int index) {
  return kind == 1 ? pvt::Device::cuda(index) : pvt::Device::host();
}

// The backend of a device this process may use, or the refusal.
pvt::Status usable_backend(pvt::Device device, pvt::Backend** backend) {
  PVT_RETURN_IF_ERROR(pvt::check_device_usable(device));
  return pvt::get_backend(device, backend);
}

}  // namespace

extern "C" {

// Caps the bytes pooled on the device (0: no pool); trims what is over it.
int pvt_set_pool_limit(int kind, int index, int64_t bytes, char* err, int64_t err_len) {
  return report(pvt::set_pool_limit(device_of(kind, index), bytes), err, err_len);
}

int64_t pvt_pool_limit(int kind, int index) { return pvt::pool_limit(device_of(kind, index)); }

// Hands every pooled chunk of the device back to the driver (the host: punches its pages).
int pvt_trim_pool(int kind, int index, char* err, int64_t err_len) {
  const pvt::Device device = device_of(kind, index);
  const pvt::Status usable = pvt::check_device_usable(device);
  return report(usable.ok() ? pvt::pool_trim(device) : usable, err, err_len);
}

// Creates chunks of `chunk_bytes` (0: the caches' default, 2 MiB; rounded up to the granularity, as
// a cache rounds its chunk) into the pool until it holds `bytes` of them or a bound stops it;
// *created: how many were made.
int pvt_fill_pool(int kind, int index, int64_t chunk_bytes, int64_t bytes, int64_t* created, char* err,
                  int64_t err_len) {
  *created = 0;
  if (chunk_bytes < 0) {
    return report(pvt::Status(pvt::Code::kInvalidArgument,
                              "chunk_bytes must be >= 0 (0: the default), got " + std::to_string(chunk_bytes)),
                  err, err_len);
  }
  pvt::Backend* backend = nullptr;
  const pvt::Status usable = usable_backend(device_of(kind, index), &backend);
  if (!usable.ok()) return report(usable, err, err_len);
  const size_t gran = backend->granularity();
  size_t cb = chunk_bytes ? static_cast<size_t>(chunk_bytes) : pvt::kDefaultChunkBytes;
  cb = (cb + gran - 1) / gran * gran;
  return report(pvt::pool_fill(backend, cb, bytes, created), err, err_len);
}

// Unmaps the released slot-cache chunks of the device whose streams have finished (wait != 0: all,
// blocking until their streams are done); *pending: chunks still waiting for their streams.
int pvt_collect(int kind, int index, int wait, int64_t* pending, char* err, int64_t err_len) {
  *pending = 0;
  const pvt::Device device = device_of(kind, index);
  const pvt::Status usable = pvt::check_device_usable(device);
  if (!usable.ok()) return report(usable, err, err_len);
  size_t left = 0;
  const int code = report(pvt::SlotCache::collect_all(device, wait != 0, &left), err, err_len);
  *pending = static_cast<int64_t>(left);
  return code;
}

}  // extern "C"
