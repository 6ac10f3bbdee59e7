# cuda.cmake - test_cuda_ops in its CPU-substitute mode (BFIT_TEST_CUDA_ON_CPU=1:
# CPU devices in the GPU's places), so CI runs the test's own code on every
# build, GPU or not. It checks the test's harness (buffers on three devices,
# the comparisons, the whole-model cases), not the GPU: test_cuda_ops itself
# (label cuda) is the GPU's test and is skipped without one.
add_test(NAME test_cuda_ops_on_cpu COMMAND test_cuda_ops)
set_tests_properties(test_cuda_ops_on_cpu PROPERTIES TIMEOUT 900
  ENVIRONMENT "BFIT_TEST_CUDA_ON_CPU=1;BFIT_SOURCE_DIR=${PROJECT_SOURCE_DIR};BFIT_BINARY_DIR=${PROJECT_BINARY_DIR};OMP_NUM_THREADS=2"
  WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
