# ckpt.cmake - checkpoints and resuming through the command line:
# tests/cli/ckpt_kill.sh kills real training processes (SIGKILL, SIGTERM,
# inside the checkpoint write) and resumes them; tests/cli/ckpt_resume.sh
# checks exact resumption (auto, adaptive, other memory), refusals, damaged
# files, checkpoints as weights (PyTorch too), running out of memory.
# Two tests (its SIGKILL loop; SIGTERM, two signals and the kill in the
# write), each well under a minute: together they passed one at -j2 under load.
add_test(NAME cli_ckpt_kill
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/ckpt_kill.sh $<TARGET_FILE:batchfit_cli> ${PROJECT_SOURCE_DIR} kill)
add_test(NAME cli_ckpt_kill_term
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/ckpt_kill.sh $<TARGET_FILE:batchfit_cli> ${PROJECT_SOURCE_DIR}
                 term,two,write)
set_tests_properties(cli_ckpt_kill cli_ckpt_kill_term PROPERTIES TIMEOUT 900 ENVIRONMENT "OMP_NUM_THREADS=1"
                     PASS_REGULAR_EXPRESSION "[0-9]+ passed, 0 failed")
# ckpt_resume.sh likewise: the resumed runs (auto, adaptive, token budgets),
# and the files (other memory, refusals, damage, weights, out of memory).
add_test(NAME cli_ckpt_resume
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/ckpt_resume.sh $<TARGET_FILE:batchfit_cli> ${PROJECT_SOURCE_DIR}
                 ${BFIT_PYTHON} runs)
add_test(NAME cli_ckpt_resume_files
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/ckpt_resume.sh $<TARGET_FILE:batchfit_cli> ${PROJECT_SOURCE_DIR}
                 ${BFIT_PYTHON} files)
set_tests_properties(cli_ckpt_resume cli_ckpt_resume_files PROPERTIES TIMEOUT 900 ENVIRONMENT "OMP_NUM_THREADS=2"
                     PASS_REGULAR_EXPRESSION "[0-9]+ passed, 0 failed")
