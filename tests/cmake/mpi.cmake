# mpi.cmake - data-parallel training under mpirun on this machine
# (tests/mpi/dist_test.py, one test per case, label mpi). They exit 77
# (skipped, never passed) when the build has no MPI or mpirun is missing;
# built without MPI, mpi_absent checks that a run under a launcher says so.
# The sanitizer run: Open MPI's plugins stay loaded (nodlclose.c) so that
# LeakSanitizer can name, and the suppressions cover, what they never free;
# the ASan runtime must come first among the preloaded libraries. Open MPI's
# libraries have no frame pointers: leaks are traced by the slow unwinder.
set(BFIT_MPI_PRELOAD "")
if(BFIT_HAVE_MPI AND BFIT_SANITIZE)
  add_library(bfit_nodlclose SHARED ${CMAKE_CURRENT_SOURCE_DIR}/mpi/nodlclose.c)
  target_compile_options(bfit_nodlclose PRIVATE -fno-sanitize=all)
  target_link_options(bfit_nodlclose PRIVATE -fno-sanitize=all)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so OUTPUT_VARIABLE _bfit_asan
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(BFIT_MPI_PRELOAD "${_bfit_asan}:$<TARGET_FILE:bfit_nodlclose>")
endif()

set(BFIT_MPI_CASES weights2 weights3 rank_memory rank_oom rank_nomem kill term_one mismatch alone_on adaptive auto_refused
    resume_exact commands tokens_refused short_step dist_off term_after)
foreach(case ${BFIT_MPI_CASES})
  if(BFIT_HAVE_MPI AND BFIT_PYTHON)
    add_test(NAME mpi_${case} COMMAND ${BFIT_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/mpi/dist_test.py
             $<TARGET_FILE:batchfit_cli> ${case})
  else()
    add_test(NAME mpi_${case} COMMAND sh -c "echo 'built without MPI (or python3): skipped'; exit 77")
  endif()
  # one thread per rank: ranks may outnumber the cores (--oversubscribe)
  # BFIT_RANK_PRELOAD: what dist_test.py preloads into the ranks (not mpirun)
  set_tests_properties(mpi_${case} PROPERTIES LABELS mpi SKIP_RETURN_CODE 77 TIMEOUT 600
                       ENVIRONMENT "OMP_NUM_THREADS=1;BFIT_RANK_PRELOAD=${BFIT_MPI_PRELOAD}")
endforeach()
if(BFIT_MPI_PRELOAD AND TEST test_dist)
  set_tests_properties(test_dist PROPERTIES ENVIRONMENT
    "OMP_NUM_THREADS=2;LD_PRELOAD=${BFIT_MPI_PRELOAD};ASAN_OPTIONS=detect_leaks=1:protect_shadow_gap=0:fast_unwind_on_malloc=0")
endif()
if(NOT BFIT_HAVE_MPI)
  # a job of two processes, as mpirun would start it, refused by a build
  # without MPI (instead of two runs each training alone)
  add_test(NAME mpi_absent COMMAND sh -c "OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 \
$<TARGET_FILE:batchfit_cli> train --model ${PROJECT_SOURCE_DIR}/models/mlp.cfg --max-steps 1 --quiet")
  set_tests_properties(mpi_absent PROPERTIES LABELS mpi TIMEOUT 60
                       PASS_REGULAR_EXPRESSION "built without MPI, but the launcher started 2 processes")
endif()
