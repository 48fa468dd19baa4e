// AURA: TurboQuant-style KV-cache compression and decode attention over the
// compressed cache.
#pragma once

#include "tilekernels/aura/fa_reduce_hadamard.hpp"
#include "tilekernels/aura/flash_pass2.hpp"
#include "tilekernels/core.hpp"
