// StepCounters: numbered steps that a device finishes in order, both counts readable from the host
// without a driver call (issue 30 point 5). StepDoorbell (kernels/step_doorbell_cuda.h) implements
// it: the host rings step n (issued), the device writes n when its step has finished.
// A region told to use them (Region::use_counters) defers an unmap until every step issued by then
// has finished. Unlike an event recorded by a graph node, the fence is exact when launches are made
// ahead of their release: an event is re-recorded by a launch that has not been released yet, and a
// reserve waiting on it would wait for a ring that its own thread has to make.
#pragma once

#include <cstdint>

namespace pvt {

class StepCounters {
 public:
  virtual ~StepCounters() = default;
  // Steps released so far: any of them may use memory that is being unmapped now.
  virtual uint64_t issued() const = 0;
  // Steps finished (in order): memory used by steps <= finished() may go.
  virtual uint64_t finished() const = 0;
  // No step will be issued any more and every issued one has finished: regions may forget these.
  virtual bool retired() const = 0;
};

}  // namespace pvt
