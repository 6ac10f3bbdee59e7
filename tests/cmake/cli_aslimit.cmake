# cli_aslimit.cmake - runs under an address-space limit (ulimit -v) are
# refused, not crashed: tests/cli/aslimit.sh (resnet50's) and
# aslimit_cnn.sh (small models'). nosan: ASan's shadow memory
# needs more address space than any limit allows.
find_program(BFIT_BASH bash REQUIRED) # (cached by whichever file comes first)
add_test(NAME cli_aslimit
         COMMAND ${BFIT_BASH} ${PROJECT_SOURCE_DIR}/tests/cli/aslimit.sh $<TARGET_FILE:batchfit_cli> ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_aslimit PROPERTIES TIMEOUT 600 LABELS nosan WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
# the small CNN's cases: tests/cli/aslimit_cnn.sh
add_test(NAME cli_aslimit_cnn
         COMMAND ${BFIT_BASH} ${PROJECT_SOURCE_DIR}/tests/cli/aslimit_cnn.sh $<TARGET_FILE:batchfit_cli>
                 ${PROJECT_SOURCE_DIR} ${BFIT_PYTHON})
set_tests_properties(cli_aslimit_cnn PROPERTIES TIMEOUT 300 LABELS nosan WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
# what the log says under a limit: tests/cli/aslimit_log.sh (seconds)
add_test(NAME cli_aslimit_log
         COMMAND ${BFIT_BASH} ${PROJECT_SOURCE_DIR}/tests/cli/aslimit_log.sh $<TARGET_FILE:batchfit_cli>
                 ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_aslimit_log PROPERTIES TIMEOUT 120 LABELS nosan WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
# --eval-batch named where lowering it makes up what a step lacks, at
# the edge found by bisection: tests/cli/aslimit_eval.sh (exit 77: no
# Fashion-MNIST)
add_test(NAME cli_aslimit_eval
         COMMAND ${BFIT_BASH} ${PROJECT_SOURCE_DIR}/tests/cli/aslimit_eval.sh $<TARGET_FILE:batchfit_cli>
                 ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_aslimit_eval PROPERTIES TIMEOUT 300 LABELS nosan SKIP_RETURN_CODE 77
                     WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
