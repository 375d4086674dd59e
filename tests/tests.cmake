# Unit tests: every tests/unit/test_*.c is one cmocka executable and one ctest test.
# Golden data: WICK_GOLDEN, else ../shared/golden beside the checkout.
if(DEFINED ENV{WICK_GOLDEN})
  set(WICK_GOLDEN_DIR $ENV{WICK_GOLDEN})
else()
  get_filename_component(WICK_GOLDEN_DIR ${CMAKE_SOURCE_DIR}/../shared/golden ABSOLUTE)
endif()

if(CMOCKA_FOUND)
  file(GLOB WICK_UNIT_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/unit/test_*.c)
  foreach(t ${WICK_UNIT_TESTS})
    get_filename_component(name ${t} NAME_WE)
    add_executable(${name} ${t} ${CMAKE_SOURCE_DIR}/tests/unit/testutil.c)
    target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/unit)
    target_link_libraries(${name} PRIVATE wickcore PkgConfig::CMOCKA)
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES
      ENVIRONMENT "WICK_GOLDEN=${WICK_GOLDEN_DIR};WICK_SOURCE_DIR=${CMAKE_SOURCE_DIR};WICK_BIN=$<TARGET_FILE:wick>"
      TIMEOUT 600 SKIP_RETURN_CODE 77)
  endforeach()
  # x86-64: the golden conformance suite on the lower kernel levels too
  # (WICK_ISA caps every kernel choice; the first test of the binary checks
  # that it did), so the AVX-512 path is not the only one run end to end.
  if(WICK_ARCH STREQUAL "x86_64")
    foreach(level scalar avx2)
      add_test(NAME test_models_golden_${level} COMMAND test_models_golden)
      set_tests_properties(test_models_golden_${level} PROPERTIES
        ENVIRONMENT "WICK_ISA=${level};WICK_GOLDEN=${WICK_GOLDEN_DIR};WICK_SOURCE_DIR=${CMAKE_SOURCE_DIR}"
        TIMEOUT 900 SKIP_RETURN_CODE 77)
    endforeach()
  endif()
  # The real presets at full size: minutes under the sanitizers, so opt-in
  # (ctest -R test_synth_full_presets after clearing DISABLED, or run
  # WICK_SYNTH_FULL=1 build-test/test_synth).
  add_test(NAME test_synth_full_presets COMMAND test_synth)
  set_tests_properties(test_synth_full_presets PROPERTIES ENVIRONMENT "WICK_SYNTH_FULL=1" DISABLED TRUE)
else()
  message(WARNING "cmocka not found: unit tests are not built (apt-get install libcmocka-dev)")
endif()

# Script tests (shell/node) under tests/cli/*.sh get the wick binary as $WICK_BIN.
file(GLOB WICK_SCRIPT_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/cli/*.sh)
foreach(t ${WICK_SCRIPT_TESTS})
  get_filename_component(name ${t} NAME_WE)
  add_test(NAME cli_${name} COMMAND bash ${t})
  set_tests_properties(cli_${name} PROPERTIES
    ENVIRONMENT "WICK_GOLDEN=${WICK_GOLDEN_DIR};WICK_SOURCE_DIR=${CMAKE_SOURCE_DIR};WICK_BIN=$<TARGET_FILE:wick>"
    TIMEOUT 900 SKIP_RETURN_CODE 77)
endforeach()

# AArch64: cross build + the unit tests and a golden subset under qemu
# (scripts/test-aarch64.sh, its own build tree inside this one). From x86-64
# only; skipped with a message where the cross toolchain is missing, a
# failure under CI=true. It starts first (COST): it is the longest test.
if(WICK_ARCH STREQUAL "x86_64" AND NOT CMAKE_CROSSCOMPILING AND NOT WICK_FUZZ)
  add_test(NAME test_aarch64_qemu COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/test-aarch64.sh ${CMAKE_BINARY_DIR}/aarch64)
  set_tests_properties(test_aarch64_qemu PROPERTIES
    ENVIRONMENT "WICK_GOLDEN=${WICK_GOLDEN_DIR}" TIMEOUT 1500 SKIP_RETURN_CODE 77 COST 10000)
endif()

if(WICK_FUZZ)
  file(GLOB WICK_FUZZERS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_*.c)
  foreach(f ${WICK_FUZZERS})
    get_filename_component(name ${f} NAME_WE)
    add_executable(${name} ${f})
    target_compile_options(${name} PRIVATE -fsanitize=fuzzer)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(${name} PRIVATE wickcore)
  endforeach()
endif()
