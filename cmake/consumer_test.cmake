# SPDX-License-Identifier: MIT
# ctest entry: configure, build and run tests/consumer against this tree.
#   MODE=find_package      install BUILD_DIR into a temporary prefix, check
#                          that it holds the library's headers and none of the
#                          test or bench SPIR-V, then find_package(tilekernels).
#   MODE=add_subdirectory  the consumer adds SOURCE_DIR as a subproject.
#   MODE=fetchcontent      the consumer takes SOURCE_DIR through FetchContent
#                          (SOURCE_DIR given: no download, no network).
# The subproject modes configure tilekernels from scratch in the consumer's
# build, so they keep to what a consumer of one kernel needs: its shaders
# only (TILEKERNELS_SHADER_FILTER) and tilekernels' defaults for a
# subproject (no tests, benchmarks or examples, no build type). CI runs on
# two cores against a time budget; compiling every shader again twice would
# cost more than the rest of the consumer checks together.
# Run as: cmake -DMODE=... -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK=... -DCXX=... -P consumer_test.cmake
file(REMOVE_RECURSE "${WORK}")
set(configure_args -S "${SOURCE_DIR}/tests/consumer" -B "${WORK}/build" "-DTILEKERNELS_CONSUMER_MODE=${MODE}")
if(CXX)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${CXX}")
endif()
if(MODE STREQUAL "find_package")
  execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${WORK}/prefix"
                  RESULT_VARIABLE rc OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cmake --install failed")
  endif()
  set(inc "${WORK}/prefix/include/tilekernels")
  foreach(present version.hpp spirv/features.hpp spirv/aura/flash_pass2.hpp core.hpp)
    if(NOT EXISTS "${inc}/${present}")
      message(FATAL_ERROR "the installed package lacks tilekernels/${present}")
    endif()
  endforeach()
  foreach(absent spirv/test spirv/bench)
    if(EXISTS "${inc}/${absent}")
      message(FATAL_ERROR "the installed package holds tilekernels/${absent}, which only the tests and benchmarks use")
    endif()
  endforeach()
  list(APPEND configure_args "-DCMAKE_PREFIX_PATH=${WORK}/prefix" -DCMAKE_BUILD_TYPE=Release)
elseif(MODE STREQUAL "add_subdirectory" OR MODE STREQUAL "fetchcontent")
  list(APPEND configure_args "-DTILEKERNELS_SOURCE_DIR=${SOURCE_DIR}"
       "-DTILEKERNELS_SHADER_FILTER=^aura/flash_pass2[.]comp$")
else()
  message(FATAL_ERROR "consumer_test.cmake: unknown MODE '${MODE}'")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" ${configure_args} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer (${MODE}) failed")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${WORK}/build" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer (${MODE}) failed")
endif()
execute_process(COMMAND "${WORK}/build/consumer" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the consumer (${MODE}) failed")
endif()
