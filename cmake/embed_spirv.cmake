# SPDX-License-Identifier: MIT
# Turns a SPIR-V binary into a header holding its words as a
# `inline constexpr std::uint32_t` array (uint32 keeps pCode aligned) and a
# span over it named SYMBOL (empty for shaders a build does not compile).
# Run as: cmake -DSPV=in.spv -DHEADER=out.hpp -DSYMBOL=name -P embed_spirv.cmake
file(READ "${SPV}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR rem "${n} % 8")
if(n EQUAL 0 OR NOT rem EQUAL 0)
  message(FATAL_ERROR "${SPV} is not a whole number of 32-bit words")
endif()
# SPIR-V words are little-endian on disk: reverse each group of four bytes.
string(REGEX REPLACE "([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])"
       "0x\\4\\3\\2\\1u," words "${hex}")
string(REGEX REPLACE "(([^,]*,){8})" "\\1\n  " words "${words}")
file(WRITE "${HEADER}.tmp"
"// Generated from ${SOURCE} by cmake/embed_spirv.cmake. Do not edit.
#pragma once
#include <cstdint>
#include <span>
namespace tilekernels::spirv {
inline constexpr std::uint32_t ${SYMBOL}_words[] = {
  ${words}
};
inline constexpr std::span<const std::uint32_t> ${SYMBOL}{${SYMBOL}_words};
}  // namespace tilekernels::spirv
")
file(COPY_FILE "${HEADER}.tmp" "${HEADER}" ONLY_IF_DIFFERENT)
file(REMOVE "${HEADER}.tmp")
