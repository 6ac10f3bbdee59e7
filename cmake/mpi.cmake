# mpi.cmake - data-parallel training over MPI (src/device/comm.c, src/dist/)
# and, in the CUDA module, NCCL for the gradient sum on GPUs.
#
# BFIT_MPI: AUTO (default) builds it when an MPI C library is found (Debian:
# libopenmpi-dev); ON requires it and stops with the reason; OFF never builds
# it (then `batchfit train` under mpirun says it was built without MPI). Sets
# BFIT_HAVE_MPI, and BFIT_HAVE_NCCL when the CUDA backend is on and NCCL is
# found beside the toolkit (BFIT_NCCL_LIB, BFIT_NCCL_INC).
set(BFIT_MPI AUTO CACHE STRING "data-parallel training over MPI: AUTO (when an MPI library is found), ON, OFF")
set_property(CACHE BFIT_MPI PROPERTY STRINGS AUTO ON OFF)

string(TOUPPER "${BFIT_MPI}" _bfit_mpi_mode)
if(NOT _bfit_mpi_mode STREQUAL "AUTO")
  if(BFIT_MPI)
    set(_bfit_mpi_mode ON)
  else()
    set(_bfit_mpi_mode OFF)
  endif()
endif()

set(BFIT_HAVE_MPI OFF)
set(BFIT_HAVE_NCCL OFF)
if(NOT _bfit_mpi_mode STREQUAL "OFF")
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    set(BFIT_HAVE_MPI ON)
    message(STATUS "MPI: on (MPI ${MPI_C_VERSION}, ${MPI_C_LIB_NAMES}; launcher: ${MPIEXEC_EXECUTABLE})")
  elseif(_bfit_mpi_mode STREQUAL "ON")
    message(FATAL_ERROR "BFIT_MPI=ON but no MPI C library was found: install libopenmpi-dev (scripts/setup.sh) "
                        "or configure with -DBFIT_MPI=OFF (or AUTO) for a build without data-parallel training.")
  else()
    message(STATUS "MPI: off (no MPI C library found; apt-get install libopenmpi-dev openmpi-bin)")
  endif()
else()
  message(STATUS "MPI: off (BFIT_MPI=OFF)")
endif()

# NCCL: the GPU side of the gradient sum, in the CUDA module. Without it a
# cuda device under MPI says so when a run asks for its collective.
if(BFIT_HAVE_MPI AND BFIT_HAVE_CUDA)
  find_library(BFIT_NCCL_LIB nccl HINTS ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib64 lib)
  find_path(BFIT_NCCL_INC nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  if(BFIT_NCCL_LIB AND BFIT_NCCL_INC)
    set(BFIT_HAVE_NCCL ON)
    message(STATUS "NCCL: on (${BFIT_NCCL_LIB})")
  else()
    message(STATUS "NCCL: off (nccl.h and libnccl not found beside the CUDA toolkit: GPUs cannot train data-parallel)")
  endif()
endif()
