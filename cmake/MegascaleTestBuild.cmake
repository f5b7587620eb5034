# How the test executables' own sources compile: megascale_test_build(TARGET) for each of them.
#
# MEGASCALE_TEST_PCH: <gtest/gtest.h> is precompiled once, in megascale_test_pch, and every test
# target reuses that PCH (REUSE_FROM). Every tests/*_test.cpp includes the header, and parsing it is a
# few seconds of each compile. Reuse needs the same compile flags in every test target, which they
# have (the project's warnings, the sanitizer options, the build type's flags, MEGASCALE_TEST_OPT);
# GCC checks that the PCH fits each compile (-Winvalid-pch, an error under -Werror), so a mismatch
# fails the build rather than passing over the PCH in silence. Off by default under ccache: ccache
# does not cache a compile that uses a PCH unless its sloppiness settings allow it, so a developer's
# warm rebuild would get slower.
#
# MEGASCALE_TEST_OPT: optimization flags for the test sources only, after the build type's (the last
# -O wins); the libraries under test keep the build type's. scripts/test.sh's sanitizer stages use -Og:
# a test source then compiles in about half the CPU time of -O1 (GCC spends 80% of a test's -O1 compile
# optimizing GoogleTest's expanded macros), the sanitizers still instrument every access, and the
# libraries' code, where the races and memory errors under test are, is built as before.
set(megascale_test_pch_default ON)
if(CMAKE_CXX_COMPILER_LAUNCHER MATCHES "ccache")
  set(megascale_test_pch_default OFF)
endif()
option(MEGASCALE_TEST_PCH "Precompile <gtest/gtest.h> once for all test executables"
       ${megascale_test_pch_default})
set(MEGASCALE_TEST_OPT "" CACHE STRING
    "Optimization flags for test sources only, e.g. -Og (empty: the build type's)")

function(megascale_test_build target)
  if(MEGASCALE_TEST_OPT)
    separate_arguments(opt UNIX_COMMAND "${MEGASCALE_TEST_OPT}")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${opt}>)
  endif()
  if(NOT MEGASCALE_TEST_PCH)
    return()
  endif()
  if(NOT TARGET megascale_test_pch)
    # The PCH's owner: an executable like the tests (-fPIE, gtest's definitions, the warnings, the
    # test flags), built from a source that only includes the header.
    set(src ${CMAKE_CURRENT_BINARY_DIR}/megascale_test_pch.cpp)
    file(CONFIGURE OUTPUT ${src} CONTENT "// The owner of the tests' precompiled header.\n")
    add_executable(megascale_test_pch ${src})
    target_link_libraries(megascale_test_pch PRIVATE GTest::gtest GTest::gtest_main megascale_warnings)
    target_compile_definitions(megascale_test_pch PRIVATE MEGASCALE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
    if(MEGASCALE_TEST_OPT)
      target_compile_options(megascale_test_pch PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${opt}>)
    endif()
    target_precompile_headers(megascale_test_pch PRIVATE <gtest/gtest.h>)
  endif()
  target_precompile_headers(${target} REUSE_FROM megascale_test_pch)
endfunction()
