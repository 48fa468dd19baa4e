// SPDX-License-Identifier: MIT
// AURA: TurboQuant-style KV-cache compression (codebooks, rotations, encode,
// decode) and decode attention over the compressed cache (split-K merge,
// merge + Hadamard undo).
#pragma once

#include "tilekernels/aura/cache_write.hpp"
#include "tilekernels/aura/codebook.hpp"
#include "tilekernels/aura/decode.hpp"
#include "tilekernels/aura/decode_attention.hpp"
#include "tilekernels/aura/encode.hpp"
#include "tilekernels/aura/fa_reduce_hadamard.hpp"
#include "tilekernels/aura/key_centre.hpp"
#include "tilekernels/aura/flash_pass2.hpp"
#include "tilekernels/aura/paged_cache.hpp"
#include "tilekernels/aura/rotation.hpp"
#include "tilekernels/core.hpp"
