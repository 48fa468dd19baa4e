// SPDX-License-Identifier: MIT
// tilekernels core: context, buffers, tensors, errors, dtypes, timing, the
// variant tables and workspaces every kernel is built on, and the version.
#pragma once

#include "tilekernels/core/buffer.hpp"
#include "tilekernels/core/context.hpp"
#include "tilekernels/core/device_info.hpp"
#include "tilekernels/core/dispatch.hpp"
#include "tilekernels/core/dtype.hpp"
#include "tilekernels/core/error.hpp"
#include "tilekernels/core/kernel.hpp"
#include "tilekernels/core/pipeline.hpp"
#include "tilekernels/core/tensor.hpp"
#include "tilekernels/core/timer.hpp"
#include "tilekernels/core/variant.hpp"
#include "tilekernels/core/workspace.hpp"
#include "tilekernels/version.hpp"
