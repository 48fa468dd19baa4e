// SPDX-License-Identifier: MIT
// Timing a demo's GPU work as an engine sees it: on a busy GPU.
//
// A GPU reaches full speed only after a fraction of a second of sustained
// load (before that the same work takes several times longer) and slows
// down again when it idles (bench/notes/2026-11-aura-decode-attention-formats.md). An
// engine's decode loop keeps it busy, so the demos time their work after
// warm_up() and without idle gaps between the timed runs.
#pragma once

#include <tilekernels/core.hpp>

#include <algorithm>
#include <cmath>

namespace tilekernels::examples {

// `run(copies)` records `copies` untimed copies of the work and one timed
// copy into one command buffer, submits it, waits and returns the timed
// copy's GPU seconds. warm_up() calls it in bursts of about 20 ms for at
// least half a second, then until two bursts agree within 3% (at most ~5 s).
// Nothing on a CPU device.
template <class Run>
void warm_up(const Context& ctx, Run&& run) {
  if (ctx.info().is_cpu()) return;
  const int burst = static_cast<int>(std::clamp(0.02 / run(0), 10.0, 2000.0));
  double spent = 0, last = 0;
  for (int i = 0; i < 500 && spent < 5; ++i) {
    const double now = run(burst);
    spent += now * (burst + 1);
    if (spent > 0.5 && std::abs(now - last) < 0.03 * last) return;
    last = now;
  }
}

}  // namespace tilekernels::examples
