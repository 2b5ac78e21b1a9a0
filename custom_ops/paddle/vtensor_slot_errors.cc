// vtensor_slot_errors: read and clear a slot cache's device error flag (one device-to-host copy: the
// one synchronisation check_slot_errors costs). Set by a CUDA kernel that refused a sequence whose
// rows were not mapped (or past max_seq_len, or a slot id out of range).
//   Cache  a slot cache tensor;  Out  int32 [1] on the CPU: the flag before clearing (0 or 1).
// On the CPU the ops raise instead of flagging, so the flag stays 0.
#include "../op_names.h"
#include "vtensor_slot_common.h"

#ifdef PADDLE_VTENSOR_WITH_CUDA
#include <cuda_runtime.h>
#endif

std::vector<paddle::Tensor> VTensorSlotErrors(const paddle::Tensor& cache_tensor) {
  const char* op = pvt::names::kSlotErrors;
  auto cache = pvt::slot_cache_of(cache_tensor, op, "cache");
  paddle::Tensor out = paddle::full({1}, 0, phi::DataType::INT32, phi::CPUPlace());
  if (cache_tensor.place().GetType() == phi::AllocationType::CPU || !cache->attachment()) return {out};
#ifdef PADDLE_VTENSOR_WITH_CUDA
  pvt::DeviceGuard guard(cache_tensor.place(), op);
  pvt::SlotDeviceTensors state = pvt::slot_device_state(cache, cache_tensor.place());
  out = state.error_flag.copy_to(phi::CPUPlace(), /*blocking=*/true);
  auto stream = static_cast<cudaStream_t>(pvt::stream_of(state.error_flag));
  PD_CHECK(cudaMemsetAsync(state.error_flag.data(), 0, sizeof(int32_t), stream) == cudaSuccess, op,
           ": clearing the error flag failed");
#endif
  return {out};
}

std::vector<std::vector<int64_t>> VTensorSlotErrorsInferShape(const std::vector<int64_t>&) { return {{1}}; }
std::vector<paddle::DataType> VTensorSlotErrorsInferDtype(const paddle::DataType&) { return {phi::DataType::INT32}; }

PVT_BUILD_OP(PVT_OP_SLOT_ERRORS)
    .Inputs({"Cache"})
    .Outputs({"Out"})
    .SetKernelFn(PD_KERNEL(VTensorSlotErrors))
    .SetInferShapeFn(PD_INFER_SHAPE(VTensorSlotErrorsInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(VTensorSlotErrorsInferDtype));
