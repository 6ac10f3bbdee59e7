# The train/eval commands end to end: exit codes, messages, a tiny real run.
add_test(NAME cli_train COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/train.sh $<TARGET_FILE:batchfit_cli> ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_train PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 900)
