# SPDX-License-Identifier: MIT
# cmake -DDEPFILE=<file> -DTARGET=<path> -P retarget_depfile.cmake
# Makes the depfile a glslang run wrote name TARGET (the rule's output)
# instead of the .spv it compiled.
file(READ "${DEPFILE}" text)
string(FIND "${text}" ": " colon)
if(colon LESS 0)
  message(FATAL_ERROR "retarget_depfile: no target in ${DEPFILE}")
endif()
string(SUBSTRING "${text}" ${colon} -1 rest)
file(WRITE "${DEPFILE}" "${TARGET}${rest}")
