// Runs aura::FlashPass2 through an installed tilekernels package and checks
// one head by hand: two blocks with maxima 0 and ln 2 weigh 1 : 2.
#include <tilekernels/aura.hpp>

#include <cmath>
#include <cstdio>

int main() try {
  namespace tk = tilekernels;
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
  std::printf("consumer: installed tilekernels ran on %s\n", ctx.info().name.c_str());
  return 0;
} catch (const std::exception& e) {
  std::printf("consumer: %s\n", e.what());
  return 1;
}
