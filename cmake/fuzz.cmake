# The libFuzzer targets of tests/fuzz (issue 16): the JSON decoder and the workflow loader.
#
# MEND_FUZZ=ON builds them, with clang only, instrumented for libFuzzer, AddressSanitizer and
# UBSan; they hold only the few sources they exercise, so that a fuzz build takes seconds.
# tests/fuzz/run.sh configures such a build in a directory of its own (`make fuzz`, and the
# ctest `fuzz_smoke` below), never in the main build directory.
if(MEND_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "MEND_FUZZ needs clang (configure with CC=clang): libFuzzer is clang's")
  endif()
  set(MEND_FUZZ_FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_executable(fuzz_json tests/fuzz/fuzz_json.c src/json.c)
  add_executable(fuzz_workflow tests/fuzz/fuzz_workflow.c src/workflow.c src/backoff.c
                               src/breaker.c src/utf8.c)
  foreach(f fuzz_json fuzz_workflow)
    target_include_directories(${f} PRIVATE src include)
    target_compile_options(${f} PRIVATE ${MEND_FUZZ_FLAGS})
    target_link_options(${f} PRIVATE ${MEND_FUZZ_FLAGS})
    target_link_libraries(${f} PRIVATE PkgConfig::LUA PkgConfig::JANSSON m)
  endforeach()
endif()

# Each target for 30 s in `make test`, when clang and libFuzzer's runtime are installed (the
# script exits 77, a skip, when they are not). Both run at once, on copies of their corpora.
if(MEND_TESTS AND NOT MEND_FUZZ)
  add_test(NAME fuzz_smoke
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tests/fuzz/run.sh ${CMAKE_CURRENT_SOURCE_DIR}
            ${CMAKE_BINARY_DIR}/fuzz 30)
  # One ctest slot, though the two targets want both cores: they run for their 30 s either way
  # (fewer inputs beside a shard), and a two-slot test waits for both slots to be free at once,
  # which in `make test` is only at the end, alone.
  set_tests_properties(fuzz_smoke PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600
                       ENVIRONMENT "CMAKE=${CMAKE_COMMAND}")
endif()
