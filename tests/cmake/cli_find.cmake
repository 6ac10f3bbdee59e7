# cli_find.cmake - `batchfit find` exit codes, messages and a real run
# (tests/cli/find.sh).
add_test(NAME cli_find COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/find.sh $<TARGET_FILE:batchfit_cli> ${PROJECT_SOURCE_DIR})
# Its figures (memory budgets, thread counts, f16 refused) are the CPU's:
# on a GPU machine CUDA_VISIBLE_DEVICES hides the GPU from --device auto
# (the H200 run of 2026-11-26 failed these checks there, not the GPU's work).
set_tests_properties(cli_find PROPERTIES TIMEOUT 600 ENVIRONMENT "OMP_NUM_THREADS=2;CUDA_VISIBLE_DEVICES=")
