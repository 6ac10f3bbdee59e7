# mpi.cmake - data-parallel training under mpirun on this machine
# (tests/mpi/dist_test.py, one test per case, label mpi). They exit 77
# (skipped, never passed) when the build has no MPI or mpirun is missing;
# built without MPI, mpi_absent checks that a run under a launcher says so.
set(BFIT_MPI_CASES weights2 weights3 rank_memory rank_oom rank_nomem kill mismatch alone_on adaptive auto_refused)
foreach(case ${BFIT_MPI_CASES})
  if(BFIT_HAVE_MPI AND BFIT_PYTHON)
    add_test(NAME mpi_${case} COMMAND ${BFIT_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/mpi/dist_test.py
             $<TARGET_FILE:batchfit_cli> ${case})
  else()
    add_test(NAME mpi_${case} COMMAND sh -c "echo 'built without MPI (or python3): skipped'; exit 77")
  endif()
  # one thread per rank: ranks may outnumber the cores (--oversubscribe)
  set_tests_properties(mpi_${case} PROPERTIES LABELS mpi SKIP_RETURN_CODE 77 TIMEOUT 600
                       ENVIRONMENT "OMP_NUM_THREADS=1")
endforeach()
if(NOT BFIT_HAVE_MPI)
  # a job of two processes, as mpirun would start it, refused by a build
  # without MPI (instead of two runs each training alone)
  add_test(NAME mpi_absent COMMAND sh -c "OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 \
$<TARGET_FILE:batchfit_cli> train --model ${PROJECT_SOURCE_DIR}/models/mlp.cfg --max-steps 1 --quiet")
  set_tests_properties(mpi_absent PROPERTIES LABELS mpi
                       PASS_REGULAR_EXPRESSION "built without MPI, but the launcher started 2 processes")
endif()
