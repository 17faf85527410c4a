# NCCL detection (tensor parallelism over several GPUs, issue #35); optional: without it the CUDA
# backend runs one GPU, and --tensor-parallel across GPUs says so. Looked for in LAMINA_NCCL_ROOT,
# the CUDA toolkit, the system, and the pip wheel nvidia-nccl-cu* (how the GPU image ships it).
# Sets LAMINA_HAVE_NCCL and the imported target lamina::nccl.
set(LAMINA_NCCL_ROOT "" CACHE PATH "NCCL install prefix (include/nccl.h, lib/libnccl.so)")
set(LAMINA_HAVE_NCCL OFF)
set(_nccl_hints "")
if(LAMINA_NCCL_ROOT)
  list(APPEND _nccl_hints "${LAMINA_NCCL_ROOT}")
endif()
foreach(_d ${CUDAToolkit_INCLUDE_DIRS})
  get_filename_component(_p "${_d}" DIRECTORY)
  list(APPEND _nccl_hints "${_p}")
endforeach()
find_program(_lamina_python python3)
if(_lamina_python)
  execute_process(COMMAND ${_lamina_python} -c
    "import glob, site, os\nfor s in site.getsitepackages():\n    for h in glob.glob(os.path.join(s, 'nvidia', '**', 'nccl.h'), recursive=True):\n        print(os.path.dirname(os.path.dirname(h)))\n        raise SystemExit"
    OUTPUT_VARIABLE _wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_wheel)
    list(APPEND _nccl_hints "${_wheel}")
  endif()
endif()
find_path(LAMINA_NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include)
find_library(LAMINA_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_nccl_hints} PATH_SUFFIXES lib lib64)
if(LAMINA_NCCL_INCLUDE_DIR AND LAMINA_NCCL_LIBRARY)
  add_library(lamina::nccl UNKNOWN IMPORTED)
  set_target_properties(lamina::nccl PROPERTIES IMPORTED_LOCATION "${LAMINA_NCCL_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${LAMINA_NCCL_INCLUDE_DIR}")
  set(LAMINA_HAVE_NCCL ON)
  message(STATUS "lamina: NCCL ${LAMINA_NCCL_LIBRARY}")
else()
  message(STATUS "lamina: no NCCL found (tensor parallelism across GPUs disabled; -DLAMINA_NCCL_ROOT=...)")
endif()
