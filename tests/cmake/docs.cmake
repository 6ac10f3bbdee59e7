# docs.cmake - what the docs show of commands that measure nothing (plans,
# errors) is what they print: tests/cli/docs_check.py runs each one that
# README.md and docs/*.md show. The plans there are sized for 2 threads.
add_test(NAME cli_docs
         COMMAND ${BFIT_PYTHON} ${PROJECT_SOURCE_DIR}/tests/cli/docs_check.py $<TARGET_FILE:batchfit_cli> ${PROJECT_SOURCE_DIR})
# nocheck: the plans it prints run in checking mode in cli_plan and test_plan
set_tests_properties(cli_docs PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 900 LABELS nocheck
                     PASS_REGULAR_EXPRESSION "commands checked in the docs print what the docs show")
