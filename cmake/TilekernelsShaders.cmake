# SPDX-License-Identifier: MIT
# The shader step: every shaders/<family>/<name>.comp becomes
#   <generated include dir>/tilekernels/spirv/<family>/<name>.hpp
# holding tilekernels::spirv::<family>_<name>, compiled by glslc -O with a
# DEPFILE (so editing an included .glsl rebuilds exactly its dependents),
# checked by spirv-val, then embedded. The library's families go into the
# generated include dir that is installed; shaders/test and shaders/bench,
# which only the tests and benchmarks use, into one of their own that is not.
#
# A shader may state, in lines of its own:
#   //! requires GL_KHR_cooperative_matrix     (skipped unless a compiler accepts it)
#   //! variant <suffix> -DNAME=VALUE ...       (one more module, <name>_<suffix>)
#   //! optimize                                (glslang modules: spirv-opt -O after glslang, as glslc -O does)
# A shader with a `requires` line is optional: a build whose compilers lack
# the extension writes an empty module in its place. The library's
# tilekernels/spirv/features.hpp says what the build compiled:
# TILEKERNELS_GLSLC_HAS_<EXTENSION> per probed extension and
# TILEKERNELS_HAS_<FAMILY>_<MODULE> per optional module.
#
# TILEKERNELS_GLSLANG (optional): a newer glslang standalone compiler
# (`glslang`, e.g. from the Vulkan SDK or a glslang build) for the shaders
# whose extensions the glslc lacks (GL_KHR_cooperative_matrix and
# GL_EXT_bfloat16 on Debian bookworm). It compiles only those shaders,
# without SPIR-V optimisation (spirv-opt -O made the bf16 ones slower on the
# H100: bench/notes/2026-11-gdn-chunk-o-recompute-wu.md) except those marked
# `//! optimize`, which TILEKERNELS_SPIRV_OPT (optional) optimises
# (recompute_wu_fp16 runs at half speed on the H200 without:
# bench/notes/2026-12-khr-matrices.md); spirv-val checks them when it knows
# their extensions, and says so when it does not.
#
# Everything defined here that is not a TILEKERNELS_ cache variable starts
# with _tilekernels_, so that it cannot collide with a parent project's names.

set(TILEKERNELS_GLSLC_TARGET_ENV vulkan1.2 CACHE STRING
    "glslc --target-env (vulkan1.2: vulkan1.3 emits LocalSizeId, which needs maintenance4)")
find_program(TILEKERNELS_SPIRV_VAL spirv-val)
set(TILEKERNELS_SPIRV_OPT "" CACHE FILEPATH
    "spirv-opt that knows the extensions of TILEKERNELS_GLSLANG's modules: runs -O on those marked //! optimize")
set(TILEKERNELS_GLSLANG "" CACHE FILEPATH
    "Optional newer glslang standalone compiler for shaders needing extensions glslc lacks (see TilekernelsShaders.cmake)")

# Sets <out> to whether <compiler> (glslc, or glslang when <kind> is
# glslang) compiles a shader requiring <ext>, and <out>_VAL to whether
# spirv-val accepts the result.
function(_tilekernels_probe_extension kind compiler ext out)
  set(dir "${CMAKE_CURRENT_BINARY_DIR}/probe/${kind}")
  file(MAKE_DIRECTORY "${dir}")
  set(src "${dir}/${ext}.comp")
  set(spv "${dir}/${ext}.spv")
  # A body that uses the extension where an empty one would not emit its
  # capability (spirv-val must see it to answer for real modules).
  set(body "void main() {}\n")
  if(ext STREQUAL "GL_EXT_bfloat16")
    set(body "layout(binding = 0) buffer B { float x; };\nvoid main() { x = float(bfloat16_t(x)); }\n")
  elseif(ext STREQUAL "GL_KHR_cooperative_matrix")
    string(CONCAT body "#extension GL_KHR_memory_scope_semantics : require\nlayout(binding = 0) buffer B { float x[]; };\n"
             "void main() { coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> m = "
             "coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(1.0);\n"
             "coopMatStore(m, x, 0, 16, gl_CooperativeMatrixLayoutRowMajor); }\n")
  endif()
  file(WRITE "${src}" "#version 460\n#extension ${ext} : require\nlayout(local_size_x = 32) in;\n${body}")
  if(kind STREQUAL "glslang")
    set(cmd "${compiler}" -V --target-env ${TILEKERNELS_GLSLC_TARGET_ENV} -o "${spv}" "${src}")
  else()
    set(cmd "${compiler}" --target-env=${TILEKERNELS_GLSLC_TARGET_ENV} -o "${spv}" "${src}")
  endif()
  execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  set(val FALSE)
  if(rc EQUAL 0 AND TILEKERNELS_SPIRV_VAL)
    execute_process(COMMAND "${TILEKERNELS_SPIRV_VAL}" --target-env ${TILEKERNELS_GLSLC_TARGET_ENV} "${spv}"
                    RESULT_VARIABLE vrc OUTPUT_QUIET ERROR_QUIET)
    if(vrc EQUAL 0)
      set(val TRUE)
    endif()
  endif()
  if(rc EQUAL 0)
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
  set(${out}_VAL ${val} PARENT_SCOPE)
endfunction()

# Probes every extension a shader may require, with glslc and with
# TILEKERNELS_GLSLANG, and sets in the caller's scope
# _tilekernels_glslc_has_<ext>, _tilekernels_glslang_has_<ext> and
# _tilekernels_glslang_val_<ext> (spirv-val knows the glslang module).
function(_tilekernels_probe_extensions)
  set(extensions GL_KHR_cooperative_matrix GL_EXT_bfloat16
      GL_KHR_shader_subgroup_arithmetic GL_EXT_shader_explicit_arithmetic_types_float16)
  foreach(ext IN LISTS extensions)
    _tilekernels_probe_extension(glslc "${Vulkan_GLSLC_EXECUTABLE}" ${ext} ok)
    set(glslang_ok FALSE)
    set(glslang_val FALSE)
    if(TILEKERNELS_GLSLANG)
      _tilekernels_probe_extension(glslang "${TILEKERNELS_GLSLANG}" ${ext} ok2)
      set(glslang_ok ${ok2})
      set(glslang_val ${ok2_VAL})
      message(STATUS "tilekernels: ${TILEKERNELS_GLSLANG} accepts ${ext}: ${ok2} (spirv-val knows it: ${ok2_VAL})")
    endif()
    message(STATUS "tilekernels: glslc accepts ${ext}: ${ok}")
    set(_tilekernels_glslc_has_${ext} ${ok} PARENT_SCOPE)
    set(_tilekernels_glslang_has_${ext} ${glslang_ok} PARENT_SCOPE)
    set(_tilekernels_glslang_val_${ext} ${glslang_val} PARENT_SCOPE)
  endforeach()
  set(_tilekernels_probed_extensions ${extensions} PARENT_SCOPE)
endfunction()
_tilekernels_probe_extensions()
if(NOT _tilekernels_glslc_has_GL_KHR_cooperative_matrix AND NOT _tilekernels_glslang_has_GL_KHR_cooperative_matrix)
  message(STATUS "tilekernels: no shader compiler accepts GL_KHR_cooperative_matrix, so no matrix-unit variant is "
                 "built; pass a glslang that does as -DTILEKERNELS_GLSLANG (README, Requirements)")
endif()

set(TILEKERNELS_SHADER_FILTER "" CACHE STRING
    "Regex on shader paths relative to shaders/ (e.g. ^gdn/): build only those (and shaders/core); empty builds all")

# _tilekernels_add_shaders(<target> <shader dir> <generated include dir>
#                          [FAMILIES <family>...] [EXCLUDE <family>...]
#                          [FEATURES <header>])
# Compiles shaders/<family>/*.comp of the FAMILIES named (default: every
# family but those in EXCLUDE) into headers under <generated include dir>,
# built by the custom target <target>. FEATURES: also write <header>, the
# features.hpp described at the top of this file, for these families.
function(_tilekernels_add_shaders target shader_dir gen_dir)
  cmake_parse_arguments(PARSE_ARGV 3 arg "" "FEATURES" "FAMILIES;EXCLUDE")
  set(shaders "")
  if(arg_FAMILIES)
    foreach(family IN LISTS arg_FAMILIES)
      file(GLOB_RECURSE found CONFIGURE_DEPENDS "${shader_dir}/${family}/*.comp")
      list(APPEND shaders ${found})
    endforeach()
  else()
    file(GLOB_RECURSE shaders CONFIGURE_DEPENDS "${shader_dir}/*.comp")
  endif()
  list(SORT shaders)
  foreach(family IN LISTS arg_EXCLUDE)
    # A build directory from before the split held them here: not installed.
    file(REMOVE_RECURSE "${gen_dir}/tilekernels/spirv/${family}")
  endforeach()
  set(headers "")
  set(module_lines "")  # TILEKERNELS_HAS_ lines for features.hpp
  foreach(src IN LISTS shaders)
    file(RELATIVE_PATH rel "${shader_dir}" "${src}")
    get_filename_component(family "${rel}" DIRECTORY)
    get_filename_component(name "${rel}" NAME_WE)
    if(family IN_LIST arg_EXCLUDE)
      continue()
    endif()
    file(STRINGS "${src}" directives REGEX "^//! (requires|variant|optimize)")
    set(optimize FALSE)   # an `optimize` line
    set(optional FALSE)   # a `requires` line: the build may leave it out
    set(glslc_ok TRUE)    # glslc has every required extension
    set(glslang_ok TRUE)  # TILEKERNELS_GLSLANG has every required extension
    set(validate_ok TRUE) # spirv-val knows every required extension (glslang modules)
    set(variants "|")  # the plain module: empty suffix, no defines
    foreach(line IN LISTS directives)
      if(line MATCHES "^//! requires ([A-Za-z0-9_]+)")
        set(optional TRUE)
        if(NOT _tilekernels_glslc_has_${CMAKE_MATCH_1})
          set(glslc_ok FALSE)
        endif()
        if(NOT _tilekernels_glslang_has_${CMAKE_MATCH_1})
          set(glslang_ok FALSE)
        endif()
        if(NOT _tilekernels_glslang_val_${CMAKE_MATCH_1} AND NOT _tilekernels_glslc_has_${CMAKE_MATCH_1})
          set(validate_ok FALSE)
        endif()
      elseif(line MATCHES "^//! optimize")
        set(optimize TRUE)
      elseif(line MATCHES "^//! variant ([A-Za-z0-9_]+) (.*)$")
        list(APPEND variants "${CMAKE_MATCH_1}|${CMAKE_MATCH_2}")
      endif()
    endforeach()
    set(filtered FALSE)
    # shaders/core are the Context's own (core/context.hpp includes them):
    # every build has them.
    if(TILEKERNELS_SHADER_FILTER AND NOT rel MATCHES "${TILEKERNELS_SHADER_FILTER}" AND NOT family STREQUAL "core")
      set(filtered TRUE)
    endif()
    set(use_glslang FALSE)
    set(skip FALSE)
    if(NOT glslc_ok AND NOT filtered)
      if(NOT glslang_ok)
        message(STATUS "tilekernels: not compiling ${rel} (the shader compilers lack a required extension)")
        set(skip TRUE)
      endif()
      set(use_glslang TRUE)
      if(NOT validate_ok AND NOT skip)
        message(STATUS "tilekernels: ${rel}: compiled by ${TILEKERNELS_GLSLANG}; spirv-val is too old to check it")
      endif()
      if(optimize AND NOT skip AND NOT TILEKERNELS_SPIRV_OPT)
        message(STATUS "tilekernels: ${rel}: not optimized (no TILEKERNELS_SPIRV_OPT): about half its speed on NVIDIA")
      endif()
    endif()
    foreach(variant IN LISTS variants)
      string(REPLACE "|" ";" parts "${variant}")
      list(GET parts 0 suffix)
      list(LENGTH parts nparts)
      set(defines "")
      if(nparts GREATER 1)
        list(GET parts 1 defs)
        separate_arguments(defines UNIX_COMMAND "${defs}")
      endif()
      set(stem "${name}")
      if(suffix)
        set(stem "${name}_${suffix}")
      endif()
      set(symbol "${family}_${stem}")
      string(REPLACE "/" "_" symbol "${symbol}")
      if(optional)
        string(TOUPPER "TILEKERNELS_HAS_${symbol}" macro)
        if(skip OR filtered)
          string(APPEND module_lines "#define ${macro} 0\n")
        else()
          string(APPEND module_lines "#define ${macro} 1\n")
        endif()
      endif()
      if(filtered)
        continue()
      endif()
      set(spv "${CMAKE_CURRENT_BINARY_DIR}/spirv/${family}/${stem}.spv")
      set(hdr "${gen_dir}/tilekernels/spirv/${family}/${stem}.hpp")
      if(skip)
        # An empty module: the kernel's variant table reports it as not built.
        file(MAKE_DIRECTORY "${gen_dir}/tilekernels/spirv/${family}")
        file(WRITE "${hdr}.tmp" "// Generated by cmake/TilekernelsShaders.cmake: shaders/${rel} was not compiled by this build.\n#pragma once\n#include <cstdint>\n#include <span>\nnamespace tilekernels::spirv {\ninline constexpr std::span<const std::uint32_t> ${symbol}{};\n}  // namespace tilekernels::spirv\n")
        file(COPY_FILE "${hdr}.tmp" "${hdr}" ONLY_IF_DIFFERENT)
        file(REMOVE "${hdr}.tmp")
        continue()
      endif()
      set(validate "")
      if(TILEKERNELS_SPIRV_VAL AND (NOT use_glslang OR validate_ok))
        set(validate COMMAND "${TILEKERNELS_SPIRV_VAL}" --target-env ${TILEKERNELS_GLSLC_TARGET_ENV} "${spv}")
      endif()
      if(use_glslang)
        # glslang's depfile names the .spv; the rule's output is the header.
        set(compile COMMAND "${TILEKERNELS_GLSLANG}" -V --target-env ${TILEKERNELS_GLSLC_TARGET_ENV} ${defines} -I${PROJECT_SOURCE_DIR}/include
                            --depfile "${spv}.d" -o "${spv}" "${src}"
                    COMMAND "${CMAKE_COMMAND}" -DDEPFILE=${spv}.d -DTARGET=${hdr}
                            -P "${PROJECT_SOURCE_DIR}/cmake/retarget_depfile.cmake")
        if(optimize AND TILEKERNELS_SPIRV_OPT)
          list(APPEND compile COMMAND "${TILEKERNELS_SPIRV_OPT}" -O "${spv}" -o "${spv}.opt"
                              COMMAND "${CMAKE_COMMAND}" -E rename "${spv}.opt" "${spv}")
        endif()
      else()
        set(compile COMMAND "${Vulkan_GLSLC_EXECUTABLE}" -O --target-env=${TILEKERNELS_GLSLC_TARGET_ENV} ${defines} -I${PROJECT_SOURCE_DIR}/include
                            -MD -MF "${spv}.d" -MT "${hdr}" -o "${spv}" "${src}")
      endif()
      add_custom_command(
        OUTPUT "${hdr}"
        COMMAND "${CMAKE_COMMAND}" -E make_directory "${CMAKE_CURRENT_BINARY_DIR}/spirv/${family}" "${gen_dir}/tilekernels/spirv/${family}"
        ${compile}
        ${validate}
        COMMAND "${CMAKE_COMMAND}" -DSPV=${spv} -DHEADER=${hdr} -DSYMBOL=${symbol} -DSOURCE=shaders/${rel}
                -P "${PROJECT_SOURCE_DIR}/cmake/embed_spirv.cmake"
        DEPENDS "${src}" "${PROJECT_SOURCE_DIR}/cmake/embed_spirv.cmake"
        DEPFILE "${spv}.d"
        COMMENT "glslc ${rel} ${suffix}"
        VERBATIM)
      list(APPEND headers "${hdr}")
    endforeach()
  endforeach()
  if(arg_FEATURES)
    set(glslc_lines "")
    foreach(ext IN LISTS _tilekernels_probed_extensions)
      string(TOUPPER "${ext}" macro)
      if(_tilekernels_glslc_has_${ext} OR _tilekernels_glslang_has_${ext})
        string(APPEND glslc_lines "#define TILEKERNELS_GLSLC_HAS_${macro} 1\n")
      else()
        string(APPEND glslc_lines "#define TILEKERNELS_GLSLC_HAS_${macro} 0\n")
      endif()
    endforeach()
    get_filename_component(features_dir "${arg_FEATURES}" DIRECTORY)
    file(MAKE_DIRECTORY "${features_dir}")
    file(WRITE "${arg_FEATURES}.tmp"
"// Generated by cmake/TilekernelsShaders.cmake: what the build of tilekernels
// that these headers come from compiled.
//
// TILEKERNELS_GLSLC_HAS_<EXTENSION>: 1 when the build's shader compilers
//   (glslc, or the glslang named by TILEKERNELS_GLSLANG) accepted shaders
//   that require the GLSL extension, 0 when neither did.
// TILEKERNELS_HAS_<FAMILY>_<MODULE>: one per optional SPIR-V module (a shader
//   that requires such an extension, and each of its variants): 1 when this
//   build compiled tilekernels::spirv::<family>_<module>, 0 when it did not
//   (its header then holds an empty module and the kernel reports that
//   variant as not built; a TILEKERNELS_SHADER_FILTER build also says 0 for
//   the modules it left out). Whether a device can run a compiled module is
//   decided at run time, by the kernel's variant table.
#pragma once

${glslc_lines}
${module_lines}")
    file(COPY_FILE "${arg_FEATURES}.tmp" "${arg_FEATURES}" ONLY_IF_DIFFERENT)
    file(REMOVE "${arg_FEATURES}.tmp")
  endif()
  add_custom_target(${target} ALL DEPENDS ${headers})
endfunction()
