# cli_find.cmake - `batchfit find` exit codes, messages and a real run
# (tests/cli/find.sh).
add_test(NAME cli_find COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/find.sh $<TARGET_FILE:batchfit_cli> ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_find PROPERTIES TIMEOUT 600 ENVIRONMENT "OMP_NUM_THREADS=2")
