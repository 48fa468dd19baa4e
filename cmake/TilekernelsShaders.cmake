# The shader step: every shaders/<family>/<name>.comp becomes
#   <build>/generated/include/tilekernels/spirv/<family>/<name>.hpp
# holding tilekernels::spirv::<family>_<name>, compiled by glslc -O with a
# DEPFILE (so editing an included .glsl rebuilds exactly its dependents),
# checked by spirv-val, then embedded.
#
# A shader may state, in lines of its own:
#   //! requires GL_NV_cooperative_matrix      (skipped unless glslc accepts it)
#   //! variant <suffix> -DNAME=VALUE ...       (one more module, <name>_<suffix>)
# The probe results land in tilekernels/spirv/features.hpp as
# TILEKERNELS_GLSLC_HAS_<EXTENSION> macros, so that C++ code only references
# the variants the toolchain could build.
#
# TILEKERNELS_GLSLANG (optional): a newer glslang standalone compiler (`glslang`, e.g.
# from the Vulkan SDK or a glslang build) for the shaders whose extensions
# the glslc lacks (GL_KHR_cooperative_matrix and GL_EXT_bfloat16 on Debian
# bookworm). It compiles only those shaders, without SPIR-V optimisation
# (spirv-opt -O made them slower on the H100: bench/NOTES.md); spirv-val
# checks them when it knows their extensions, and says so when it does not.
#
# Everything defined here that is not a TILEKERNELS_ cache variable starts
# with _tilekernels_, so that it cannot collide with a parent project's names.

set(TILEKERNELS_GLSLC_TARGET_ENV vulkan1.2 CACHE STRING
    "glslc --target-env (vulkan1.2: vulkan1.3 emits LocalSizeId, which needs maintenance4)")
find_program(TILEKERNELS_SPIRV_VAL spirv-val)
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

set(_tilekernels_probed_extensions GL_NV_cooperative_matrix GL_KHR_cooperative_matrix GL_EXT_bfloat16
    GL_KHR_shader_subgroup_arithmetic GL_EXT_shader_explicit_arithmetic_types_float16)
set(_tilekernels_feature_lines "")
foreach(ext IN LISTS _tilekernels_probed_extensions)
  _tilekernels_probe_extension(glslc "${Vulkan_GLSLC_EXECUTABLE}" ${ext} ok)
  set(_tilekernels_glslc_has_${ext} ${ok})
  set(_tilekernels_glslang_has_${ext} FALSE)
  set(_tilekernels_glslang_val_${ext} FALSE)
  if(TILEKERNELS_GLSLANG)
    _tilekernels_probe_extension(glslang "${TILEKERNELS_GLSLANG}" ${ext} ok2)
    set(_tilekernels_glslang_has_${ext} ${ok2})
    set(_tilekernels_glslang_val_${ext} ${ok2_VAL})
    message(STATUS "tilekernels: ${TILEKERNELS_GLSLANG} accepts ${ext}: ${ok2} (spirv-val knows it: ${ok2_VAL})")
  endif()
  string(TOUPPER "${ext}" macro)
  # The macro says whether the build compiled shaders needing the extension,
  # whichever compiler did.
  if(ok OR _tilekernels_glslang_has_${ext})
    string(APPEND _tilekernels_feature_lines "#define TILEKERNELS_GLSLC_HAS_${macro} 1\n")
  else()
    string(APPEND _tilekernels_feature_lines "#define TILEKERNELS_GLSLC_HAS_${macro} 0\n")
  endif()
  message(STATUS "tilekernels: glslc accepts ${ext}: ${ok}")
endforeach()

set(TILEKERNELS_SHADER_FILTER "" CACHE STRING
    "Regex on shader paths relative to shaders/ (e.g. ^gdn/): build only those; empty builds all")

# _tilekernels_add_shaders(<target> <shader dir> <generated include dir>)
function(_tilekernels_add_shaders target shader_dir gen_dir)
  file(GLOB_RECURSE shaders CONFIGURE_DEPENDS "${shader_dir}/*.comp")
  set(headers "")
  foreach(src IN LISTS shaders)
    file(RELATIVE_PATH rel "${shader_dir}" "${src}")
    if(TILEKERNELS_SHADER_FILTER AND NOT rel MATCHES "${TILEKERNELS_SHADER_FILTER}")
      continue()
    endif()
    get_filename_component(family "${rel}" DIRECTORY)
    get_filename_component(name "${rel}" NAME_WE)
    file(STRINGS "${src}" directives REGEX "^//! (requires|variant) ")
    set(glslc_ok TRUE)    # glslc has every required extension
    set(glslang_ok TRUE)  # TILEKERNELS_GLSLANG has every required extension
    set(validate_ok TRUE) # spirv-val knows every required extension (glslang modules)
    set(variants "|")  # the plain module: empty suffix, no defines
    foreach(line IN LISTS directives)
      if(line MATCHES "^//! requires ([A-Za-z0-9_]+)")
        if(NOT _tilekernels_glslc_has_${CMAKE_MATCH_1})
          set(glslc_ok FALSE)
        endif()
        if(NOT _tilekernels_glslang_has_${CMAKE_MATCH_1})
          set(glslang_ok FALSE)
        endif()
        if(NOT _tilekernels_glslang_val_${CMAKE_MATCH_1} AND NOT _tilekernels_glslc_has_${CMAKE_MATCH_1})
          set(validate_ok FALSE)
        endif()
      elseif(line MATCHES "^//! variant ([A-Za-z0-9_]+) (.*)$")
        list(APPEND variants "${CMAKE_MATCH_1}|${CMAKE_MATCH_2}")
      endif()
    endforeach()
    set(use_glslang FALSE)
    set(skip FALSE)
    if(NOT glslc_ok)
      if(NOT glslang_ok)
        message(STATUS "tilekernels: not compiling ${rel} (the shader compilers lack a required extension)")
        set(skip TRUE)
      endif()
      set(use_glslang TRUE)
      if(NOT validate_ok)
        message(STATUS "tilekernels: ${rel}: compiled by ${TILEKERNELS_GLSLANG}; spirv-val is too old to check it")
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
      set(spv "${CMAKE_CURRENT_BINARY_DIR}/spirv/${family}/${stem}.spv")
      set(hdr "${gen_dir}/tilekernels/spirv/${family}/${stem}.hpp")
      if(skip)
        # An empty module: the kernel's variant table reports it as not built.
        file(MAKE_DIRECTORY "${gen_dir}/tilekernels/spirv/${family}")
        file(WRITE "${hdr}.tmp" "// Generated by cmake/TilekernelsShaders.cmake: shaders/${rel} was not compiled by this build.\n#pragma once\n#include <cstdint>\n#include <span>\nnamespace tilekernels::spirv {\ninline constexpr std::span<const std::uint32_t> ${symbol}{};\n}  // namespace tilekernels::spirv\n")
        configure_file("${hdr}.tmp" "${hdr}" COPYONLY)
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
  file(WRITE "${gen_dir}/tilekernels/spirv/features.hpp.in"
       "// Generated by cmake/TilekernelsShaders.cmake: what the glslc that built the SPIR-V accepted.\n#pragma once\n${_tilekernels_feature_lines}")
  configure_file("${gen_dir}/tilekernels/spirv/features.hpp.in" "${gen_dir}/tilekernels/spirv/features.hpp" COPYONLY)
  add_custom_target(${target} ALL DEPENDS ${headers})
endfunction()
