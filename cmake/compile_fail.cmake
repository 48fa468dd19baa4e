# SPDX-License-Identifier: MIT
# A compile-fail test: compiling SOURCE must fail, and the compiler's output
# must match EXPECT (the static_assert message of the rule under test).
# Run as: cmake -DCXX=... -DSOURCE=... -DEXPECT=... -DINCLUDES=a;b -P compile_fail.cmake
set(args -std=c++20 -fsyntax-only)
foreach(dir IN LISTS INCLUDES)
  list(APPEND args "-I${dir}")
endforeach()
execute_process(COMMAND "${CXX}" ${args} "${SOURCE}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must be rejected with: ${EXPECT}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "${SOURCE} failed to compile, but without the expected message '${EXPECT}':\n${err}")
endif()
message(STATUS "rejected as expected: ${EXPECT}")
