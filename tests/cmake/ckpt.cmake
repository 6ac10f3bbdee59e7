# ckpt.cmake - checkpoints and resuming through the command line:
# tests/cli/ckpt_kill.sh kills real training processes (SIGKILL, SIGTERM,
# inside the checkpoint write) and resumes them; tests/cli/ckpt_resume.sh
# checks exact resumption (auto, adaptive, other memory), refusals, damaged
# files, checkpoints as weights (PyTorch too), running out of memory.
add_test(NAME cli_ckpt_kill
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/ckpt_kill.sh $<TARGET_FILE:batchfit_cli> ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_ckpt_kill PROPERTIES TIMEOUT 900 ENVIRONMENT "OMP_NUM_THREADS=1"
                     PASS_REGULAR_EXPRESSION "[0-9]+ passed, 0 failed")
add_test(NAME cli_ckpt_resume
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/ckpt_resume.sh $<TARGET_FILE:batchfit_cli> ${PROJECT_SOURCE_DIR}
                 ${BFIT_PYTHON})
set_tests_properties(cli_ckpt_resume PROPERTIES TIMEOUT 900 ENVIRONMENT "OMP_NUM_THREADS=2"
                     PASS_REGULAR_EXPRESSION "[0-9]+ passed, 0 failed")
