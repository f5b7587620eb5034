# Build options shared by every target.
option(MEGASCALE_BUILD_TESTS "Build unit and integration tests" ON)
option(MEGASCALE_BUILD_BENCH "Build Google Benchmark micro-benchmarks" ON)
option(MEGASCALE_WERROR "Treat warnings as errors (CI turns this on)" OFF)
option(MEGASCALE_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(MEGASCALE_TSAN "Build with ThreadSanitizer (not with MEGASCALE_SANITIZE or MEGASCALE_FUZZ)" OFF)
option(MEGASCALE_FUZZ "Build libFuzzer targets (needs clang)" OFF)
option(MEGASCALE_ENABLE_CUDA "Build CUDA parts when a toolkit is found" ON)

add_library(megascale_warnings INTERFACE)
target_compile_options(megascale_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
  -Wcast-align -Woverloaded-virtual -Wnull-dereference -Wimplicit-fallthrough>)
if(MEGASCALE_WERROR)
  target_compile_options(megascale_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()

if(MEGASCALE_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# ThreadSanitizer: data races between the wire's threads (progress thread, I/O threads) and the callers
# that post and test from theirs (NCCL's proxy threads in the plugin). Cannot be combined with ASan.
if(MEGASCALE_TSAN)
  if(MEGASCALE_SANITIZE OR MEGASCALE_FUZZ)
    message(FATAL_ERROR "MEGASCALE_TSAN=ON cannot be combined with MEGASCALE_SANITIZE or MEGASCALE_FUZZ")
  endif()
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
endif()

# Fuzzing (tests/fuzz): every target gets libFuzzer's coverage instrumentation and the sanitizers; the
# fuzz executables themselves link libFuzzer's main (-fsanitize=fuzzer, in tests/fuzz/CMakeLists.txt).
if(MEGASCALE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "MEGASCALE_FUZZ=ON needs clang (libFuzzer): configure with CC=clang CXX=clang++")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# megascale_library(NAME ... ) : a static library with the project's warnings and include layout.
function(megascale_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE megascale_warnings ${ARG_PRIVATE_DEPS})
endfunction()
