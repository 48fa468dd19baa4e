// SPDX-License-Identifier: MIT
#include <gtest/gtest.h>

#include "support.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  tktest::release_contexts();
  return result;
}
