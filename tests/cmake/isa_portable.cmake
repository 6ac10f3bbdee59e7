# isa_portable.cmake - the library and the program carry no AVX-512
# instruction outside the variants that src/device/cpu_isa.c dispatches to
# (tests/cli/isa_portable.sh): they run on any x86-64 with AVX2.
add_test(NAME isa_portable COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/isa_portable.sh $<TARGET_FILE:batchfit> $<TARGET_FILE:batchfit_shared>
         $<TARGET_FILE:batchfit_cli>)
set_tests_properties(isa_portable PROPERTIES TIMEOUT 60)
