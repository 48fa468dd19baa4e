# SPDX-License-Identifier: MIT
# Run by ctest when it starts (TEST_INCLUDE_FILES, tests/CMakeLists.txt):
# lists the gtest binary's tests and adds one ctest entry per test suite
# and lavapipe vector width, so that the kernels of a suite, built for
# their envelopes when constructed, are built once per suite rather than
# once per test (one process each).
#
# Variables (set by the including file): TILEKERNELS_SUITES_EXE, the test
# binary; TILEKERNELS_SUITES_RUNS, a list of "<width>|<gtest filter>"
# (filter * for the whole suite); TILEKERNELS_SUITES_TIMEOUT;
# TILEKERNELS_SUITES_LAUNCHER, a command prefix (may be empty).

foreach(run IN LISTS TILEKERNELS_SUITES_RUNS)
  string(REPLACE "|" ";" parts "${run}")
  list(GET parts 0 width)
  list(GET parts 1 filter)
  execute_process(COMMAND ${TILEKERNELS_SUITES_LAUNCHER} "${TILEKERNELS_SUITES_EXE}" --gtest_list_tests "--gtest_filter=${filter}"
                  OUTPUT_VARIABLE listing RESULT_VARIABLE rc TIMEOUT 120)
  if(NOT rc EQUAL 0)
    add_test(tilekernels_tests_listing.lp${width} ${TILEKERNELS_SUITES_LAUNCHER} "${TILEKERNELS_SUITES_EXE}" --gtest_list_tests)
    continue()
  endif()
  string(REPLACE "\n" ";" lines "${listing}")
  set(suite "")
  set(suites "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^([A-Za-z0-9_/]+)\\.")
      set(suite "${CMAKE_MATCH_1}")
      list(APPEND suites "${suite}")
      set(tests_${suite} "")
    elseif(line MATCHES "^  ([A-Za-z0-9_/]+)" AND suite)
      list(APPEND tests_${suite} "${suite}.${CMAKE_MATCH_1}")
    endif()
  endforeach()
  foreach(suite IN LISTS suites)
    if(filter STREQUAL "*")
      set(suite_filter "${suite}.*")
    else()
      list(JOIN tests_${suite} ":" suite_filter)
    endif()
    add_test("${suite}.lp${width}" ${TILEKERNELS_SUITES_LAUNCHER} "${TILEKERNELS_SUITES_EXE}" "--gtest_filter=${suite_filter}"
             --gtest_brief=1)
    set_tests_properties("${suite}.lp${width}" PROPERTIES
      ENVIRONMENT "TILEKERNELS_VALIDATION=1;LP_NATIVE_VECTOR_WIDTH=${width}"
      TIMEOUT ${TILEKERNELS_SUITES_TIMEOUT})
  endforeach()
endforeach()
