// SPDX-License-Identifier: MIT
// Gated DeltaNet chunked linear attention (Qwen3-Next, Qwen3.5), matching
// flash-linear-attention's kernels.
#pragma once

#include "tilekernels/core.hpp"
#include "tilekernels/gdn/chunk_forward.hpp"
#include "tilekernels/gdn/chunk_index.hpp"
#include "tilekernels/gdn/chunk_o.hpp"
#include "tilekernels/gdn/chunking.hpp"
#include "tilekernels/gdn/kkt_solve.hpp"
#include "tilekernels/gdn/l2norm.hpp"
#include "tilekernels/gdn/recompute_wu.hpp"
#include "tilekernels/gdn/recurrent_step.hpp"
#include "tilekernels/gdn/state_recurrence.hpp"
