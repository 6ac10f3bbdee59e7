# cuda.cmake - test_cuda_ops in its CPU-substitute mode (BFIT_TEST_CUDA_ON_CPU=1:
# CPU devices in the GPU's places), so CI runs the test's own code on every
# build, GPU or not. It checks the test's harness (buffers on three devices,
# the comparisons, the whole-model cases), not the GPU: test_cuda_ops itself
# (label cuda) is the GPU's test and is skipped without one.
# Two tests, bf16 training apart (50 s together in checking mode under the
# sanitizers, 20 s of it bf16's).
set(cuda_on_cpu_env "BFIT_TEST_CUDA_ON_CPU=1;BFIT_SOURCE_DIR=${PROJECT_SOURCE_DIR};BFIT_BINARY_DIR=${PROJECT_BINARY_DIR};OMP_NUM_THREADS=2")
add_test(NAME test_cuda_ops_on_cpu COMMAND test_cuda_ops)
set_tests_properties(test_cuda_ops_on_cpu PROPERTIES TIMEOUT 900
  ENVIRONMENT "${cuda_on_cpu_env};BFIT_TEST_SKIP=test_training_bf16" WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
add_test(NAME test_cuda_ops_on_cpu_bf16 COMMAND test_cuda_ops)
set_tests_properties(test_cuda_ops_on_cpu_bf16 PROPERTIES TIMEOUT 900
  ENVIRONMENT "${cuda_on_cpu_env};BFIT_TEST_ONLY=test_training_bf16" WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
# The CUDA module reaches the library only through its host table
# (cuda_plugin.h): a call of a library function links, but the module then
# fails to load on a GPU machine, and test_cuda_ops says "skipped" (run 8's
# third call). Where the module is built, none of its undefined symbols may
# be one of ours.
if(TARGET batchfit_cuda)
  add_test(NAME cuda_module_symbols COMMAND sh -c
    "u=$(nm -D --undefined-only \"$1\" | awk '$2 ~ /^bfit_/ {print $2}'); [ -z \"$u\" ] || { echo \"$1 needs the library's $u, which a module cannot reach (only the host table in src/device/cuda_plugin.h)\"; exit 1; }; echo \"$1: no undefined bfit_ symbol\""
    sh $<TARGET_FILE:batchfit_cuda>)
  set_tests_properties(cuda_module_symbols PROPERTIES TIMEOUT 60)
endif()
