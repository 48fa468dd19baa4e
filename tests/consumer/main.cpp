// SPDX-License-Identifier: MIT
// Runs aura::FlashPass2 through tilekernels as a consumer project gets it
// (an installed package, add_subdirectory or FetchContent) and checks one
// head by hand: two blocks with maxima 0 and ln 2 weigh 1 : 2.
#ifdef TILEKERNELS_CONSUMER_UMBRELLA
// An installed package: every header of the library compiles on its own.
#include <tilekernels/aura.hpp>
#include <tilekernels/gdn.hpp>
#include <tilekernels/spirv/features.hpp>
#endif
// A subproject build compiles only this kernel's shaders (see cmake/consumer_test.cmake).
#include <tilekernels/aura/flash_pass2.hpp>
#include <tilekernels/core.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>

int main() try {
  namespace tk = tilekernels;
  if (std::strcmp(tk::version_string, TILEKERNELS_VERSION_STRING) != 0) {
    std::printf("consumer: version.hpp disagrees with itself\n");
    return 1;
  }
  tk::Context ctx;
  std::vector<float> o(2 * 64), m{0.0f, std::log(2.0f)}, l{1.0f, 3.0f};
  for (int d = 0; d < 64; ++d) {
    o[d] = 1.0f + d;      // block 0: sum e^(s - 0) v
    o[64 + d] = 2.0f * d;  // block 1
  }
  auto o_t = tk::Tensor::from_floats(ctx, tk::DType::f32, {1, 2, 64}, o);
  auto m_t = tk::Tensor::from_floats(ctx, tk::DType::f32, {1, 2}, m);
  auto l_t = tk::Tensor::from_floats(ctx, tk::DType::f32, {1, 2}, l);
  tk::Tensor out(ctx, tk::DType::f32, {1, 64});
  tk::aura::FlashPass2<tk::aura::FlashPass2Config<64, tk::DType::f32, tk::DType::f32>>(ctx).run({o_t, m_t, l_t, out, {}});
  const auto got = out.download_floats();
  // M = ln 2: weights 1/2 and 1; L = 0.5 * 1 + 1 * 3 = 3.5.
  for (int d = 0; d < 64; ++d) {
    const double want = (0.5 * (1.0 + d) + 2.0 * d) / 3.5;
    if (std::abs(got[d] - want) > 1e-5 * std::abs(want) + 1e-6) {
      std::printf("consumer: slot %d got %f want %f\n", d, got[d], want);
      return 1;
    }
  }
  std::printf("consumer: tilekernels %s ran on %s\n", tk::version_string, ctx.info().name.c_str());
  return 0;
} catch (const std::exception& e) {
  std::printf("consumer: %s\n", e.what());
  return 1;
}
