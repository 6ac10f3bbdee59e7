# gpu_kit.cmake - the GPU proof kit's checking program (tests/gpu/bfit_gpu.c:
# plan against the arena's measured peak, step speed; it works inside the
# library as the tests do, so it is built here, not in bench/) and its dry
# run on the CPU device (tests/cli/gpu_kit.sh), so the kit is tested before
# it ever meets a GPU. About 35 s on a quiet machine; the timeout allows for
# a loaded one.
add_executable(bfit_gpu ${CMAKE_CURRENT_SOURCE_DIR}/gpu/bfit_gpu.c)
target_compile_options(bfit_gpu PRIVATE ${BFIT_WARN})
target_link_libraries(bfit_gpu PRIVATE batchfit)
target_include_directories(bfit_gpu PRIVATE ${PROJECT_SOURCE_DIR}/src)
add_test(NAME gpu_kit_dry_run COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/gpu_kit.sh ${PROJECT_BINARY_DIR}
                                      ${PROJECT_SOURCE_DIR})
# nocheck: the kit's logic, whose library paths the CLI tests run in checking mode
set_tests_properties(gpu_kit_dry_run PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "nosan;nocheck"
  ENVIRONMENT "OMP_NUM_THREADS=2;BFIT_PYTHON=${BFIT_PYTHON}"
  PASS_REGULAR_EXPRESSION "gpu kit dry run: all checks passed")
