# KVSCOPE_CUDA=AUTO|ON|OFF -> KVSCOPE_HAVE_CUDA, the CUDA language, CUDA::* targets.
#
# Sets KVSCOPE_HAVE_CUDA (ON when the kernels are built) and KVSCOPE_BACKENDS (what
# `kvscope --version` prints). The architectures default to sm_80 and sm_90 machine code (A100,
# H100) plus compute_90 PTX, which newer GPUs compile when the program loads: the kernels use
# cp.async, so sm_80 is their floor, and it costs little: the four .cu files take 10 s on one
# core instead of 6 (paged_attention.cu 5 s instead of 3).
# Pass -DCMAKE_CUDA_ARCHITECTURES=90 (or "native") to build for one.

set(KVSCOPE_HAVE_CUDA OFF)
set(KVSCOPE_BACKENDS "cpu; CUDA off")
string(TOUPPER "${KVSCOPE_CUDA}" _kvscope_cuda)
if(NOT _kvscope_cuda MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "KVSCOPE_CUDA=${KVSCOPE_CUDA}: expected AUTO, ON or OFF")
endif()

set(_kvscope_cuda_asked "${_kvscope_cuda}")
if(_kvscope_cuda STREQUAL "AUTO" AND KVSCOPE_PORTABLE)
  message(STATUS "CUDA: off (KVSCOPE_PORTABLE=ON: a package must run where no CUDA libraries are "
                 "installed; -DKVSCOPE_CUDA=ON builds them in anyway)")
  set(_kvscope_cuda OFF)
endif()

if(_kvscope_cuda STREQUAL "OFF")
  if(_kvscope_cuda_asked STREQUAL "OFF")
    message(STATUS "CUDA: off (KVSCOPE_CUDA=OFF): building the CPU backend only")
  endif()
else()
  # nvcc is often installed outside PATH (/usr/local/cuda/bin): look there too, unless the
  # user chose a compiler already (CMAKE_CUDA_COMPILER or $CUDACXX).
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(KVSCOPE_NVCC nvcc HINTS ENV CUDA_PATH ENV CUDA_HOME PATH_SUFFIXES bin
                 PATHS /usr/local/cuda/bin /usr/local/cuda)
    if(KVSCOPE_NVCC)
      set(ENV{CUDACXX} "${KVSCOPE_NVCC}")
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
    endif()
    enable_language(CUDA)
    # C++17: the newest dialect CMake 3.25 knows how to ask nvcc for (the kernels need no more).
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(CMAKE_CUDA_EXTENSIONS OFF)
    find_package(CUDAToolkit REQUIRED)
    set(KVSCOPE_HAVE_CUDA ON)
    list(TRANSFORM CMAKE_CUDA_ARCHITECTURES PREPEND "sm_" OUTPUT_VARIABLE _kvscope_archs)
    list(TRANSFORM _kvscope_archs REPLACE "-(real|virtual)$" "")
    string(REPLACE ";" ", " _kvscope_archs "${_kvscope_archs}")
    set(KVSCOPE_BACKENDS
        "cpu; cuda (CUDA ${CUDAToolkit_VERSION}, ${_kvscope_archs})")
    message(STATUS "CUDA: ${CMAKE_CUDA_COMPILER} (${CUDAToolkit_VERSION}), architectures "
                   "${CMAKE_CUDA_ARCHITECTURES}")
  elseif(_kvscope_cuda STREQUAL "ON")
    message(FATAL_ERROR
      "KVSCOPE_CUDA=ON but no CUDA compiler was found (nvcc not on PATH, not in /usr/local/cuda/bin, "
      "no $CUDACXX): install the CUDA toolkit, or pass -DCMAKE_CUDA_COMPILER=/path/to/nvcc, or "
      "configure with -DKVSCOPE_CUDA=OFF (or AUTO) to build the CPU backend only")
  else()
    message(STATUS "CUDA: no toolkit found (no nvcc): building the CPU backend only "
                   "(-DKVSCOPE_CUDA=ON makes this an error)")
  endif()
endif()
