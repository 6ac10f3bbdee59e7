# report.cmake - the run report end to end and in headless Chromium
# (tests/cli/report.sh): exit codes, messages, real runs, the page's DOM and
# screenshots.
add_test(NAME cli_report COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/report.sh $<TARGET_FILE:batchfit_cli> ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_report PROPERTIES TIMEOUT 900 ENVIRONMENT "OMP_NUM_THREADS=2")
