# cuda.cmake - the optional CUDA backend (src/device/cuda_*).
#
# BFIT_CUDA: AUTO (default) builds it when the CUDA toolkit, cuBLAS and
# cuDNN 9 are found and nvcc works; ON requires them and stops with the
# reason when one is missing; OFF never builds it. Sets BFIT_HAVE_CUDA and,
# when on, BFIT_CUDA_LIBS (what the CUDA module links).
set(BFIT_CUDA AUTO CACHE STRING "CUDA backend: AUTO (when the toolkit, cuBLAS and cuDNN are found), ON, OFF")
set_property(CACHE BFIT_CUDA PROPERTY STRINGS AUTO ON OFF)

string(TOUPPER "${BFIT_CUDA}" _bfit_cuda_mode)
if(NOT _bfit_cuda_mode STREQUAL "AUTO")
  if(BFIT_CUDA)
    set(_bfit_cuda_mode ON)
  else()
    set(_bfit_cuda_mode OFF)
  endif()
endif()

set(BFIT_HAVE_CUDA OFF)
set(BFIT_CUDA_LIBS "")
set(_bfit_cuda_why "")

if(NOT _bfit_cuda_mode STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND)
    set(_bfit_cuda_why "the CUDA toolkit was not found (set CUDAToolkit_ROOT to its directory)")
  elseif(NOT TARGET CUDA::cublas OR NOT TARGET CUDA::cublasLt)
    set(_bfit_cuda_why "cuBLAS/cuBLASLt were not found in the CUDA toolkit at ${CUDAToolkit_LIBRARY_DIR}")
  else()
    find_library(BFIT_CUDNN_LIB cudnn HINTS ${CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib64 lib)
    find_path(BFIT_CUDNN_INC cudnn.h HINTS ${CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
    if(NOT BFIT_CUDNN_LIB OR NOT BFIT_CUDNN_INC)
      set(_bfit_cuda_why "cuDNN (cudnn.h and libcudnn) was not found (set CUDNN_ROOT to its directory)")
    else()
      set(_v "${BFIT_CUDNN_INC}/cudnn_version.h")
      set(_bfit_cudnn_major 0)
      if(EXISTS "${_v}")
        file(STRINGS "${_v}" _l REGEX "^#define CUDNN_MAJOR [0-9]+")
        string(REGEX REPLACE "^#define CUDNN_MAJOR ([0-9]+).*" "\\1" _bfit_cudnn_major "${_l}")
      endif()
      if(_bfit_cudnn_major LESS 9)
        set(_bfit_cuda_why "cuDNN 9 or newer is needed, found major version '${_bfit_cudnn_major}' in ${BFIT_CUDNN_INC}")
      endif()
    endif()
  endif()
  if(NOT _bfit_cuda_why)
    # nvcc from the toolkit found above, unless the user chose one
    if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
      set(ENV{CUDACXX} "${CUDAToolkit_NVCC_EXECUTABLE}")
    endif()
    include(CheckLanguage)
    check_language(CUDA)
    if(NOT CMAKE_CUDA_COMPILER)
      set(_bfit_cuda_why "nvcc (${CUDAToolkit_NVCC_EXECUTABLE}) cannot compile a test program")
    endif()
  endif()
  if(_bfit_cuda_why)
    if(_bfit_cuda_mode STREQUAL "ON")
      message(FATAL_ERROR "BFIT_CUDA=ON but the CUDA backend cannot be built: ${_bfit_cuda_why}. "
                          "Configure with -DBFIT_CUDA=OFF (or AUTO) for a CPU-only build.")
    endif()
    message(STATUS "CUDA backend: off (${_bfit_cuda_why})")
  else()
    # No GPU is needed to build, so "native" is out: SASS for Hopper (sm_90,
    # the H100 we run on: no JIT at start-up) plus compute_80 PTX, which the
    # driver JIT-compiles for any later GPU (Ampere, Ada, Blackwell). Two
    # targets keep nvcc time small; override with -DCMAKE_CUDA_ARCHITECTURES.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80-virtual 90-real)
    endif()
    # one CUDA runtime in the process: the shared one, as cuBLAS and cuDNN use
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    # programs that link the library link as C programs (with the CUDA
    # libraries named below), as a user's `cc ... $(pkg-config ...)` does;
    # no device link is needed (no relocatable device code)
    set(CMAKE_CUDA_LINKER_PREFERENCE_PROPAGATES OFF)
    set(BFIT_HAVE_CUDA ON)
    set(BFIT_CUDA_LIBS CUDA::cudart CUDA::cublas CUDA::cublasLt ${BFIT_CUDNN_LIB})
    message(STATUS "CUDA backend: on (CUDA ${CUDAToolkit_VERSION}, cuDNN ${_bfit_cudnn_major}, "
                   "architectures ${CMAKE_CUDA_ARCHITECTURES})")
  endif()
else()
  message(STATUS "CUDA backend: off (BFIT_CUDA=OFF)")
endif()
