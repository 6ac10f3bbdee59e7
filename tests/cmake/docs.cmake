# docs.cmake - what the docs show of `batchfit plan` is what it prints:
# tests/cli/docs_plan.py runs every plan command in README.md and docs/*.md.
# The plans in the docs are sized for 2 threads, as here.
add_test(NAME cli_docs_plan
         COMMAND ${BFIT_PYTHON} ${PROJECT_SOURCE_DIR}/tests/cli/docs_plan.py $<TARGET_FILE:batchfit_cli> ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_docs_plan PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 900
                     PASS_REGULAR_EXPRESSION "plan commands in the docs print what the docs show")
