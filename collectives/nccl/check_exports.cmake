# Checks that the plugin's dynamic symbol table exports exactly the ncclNetPlugin_vN tables and the
# transport counters' function.
#   cmake -DPLUGIN=libnccl-net-megascale.so -DNM=nm -P check_exports.cmake
execute_process(COMMAND ${NM} -D --defined-only ${PLUGIN} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm -D ${PLUGIN} failed (${rc})")
endif()
string(REGEX MATCHALL "[^\n]+" lines "${out}")
set(found "")
foreach(line IN LISTS lines)
  string(REGEX REPLACE "^[0-9a-fA-F]* *[A-Za-z] +" "" sym "${line}")
  list(APPEND found ${sym})
endforeach()
list(SORT found)
set(expected megascaleNetCounters_v1 ncclNetPlugin_v10 ncclNetPlugin_v11 ncclNetPlugin_v12 ncclNetPlugin_v8 ncclNetPlugin_v9)
if(NOT found STREQUAL expected)
  message(FATAL_ERROR "exported: ${found}\nexpected exactly: ${expected}")
endif()
message(STATUS "exports exactly: ${found}")
