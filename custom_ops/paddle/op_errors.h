// How a core Status reaches Python: one PD_THROW whose first line is "<op>: <Code>: <message>"
// (paddle_vtensor/errors.py maps the Code to its exception type, by one table).
#pragma once

#include "../core/status.h"

namespace pvt {

// Throws a Python-visible error "<op>: <Code>: <message>" when `status` is not ok.
void throw_if_error(const Status& status, const char* op);

}  // namespace pvt
