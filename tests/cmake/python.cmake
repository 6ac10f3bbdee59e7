# python.cmake - the Python package (python/batchfit) under pytest, one CTest
# test per file of tests/python, against the shared library and command line
# of this build (BATCHFIT_LIB, BATCHFIT_CLI). Skipped (77) where
# /usr/bin/python3 lacks NumPy or pytest, and the torch tests where
# torch or the ONNX import is missing (tests/python/run.py says why).
# Not under the sanitizers: an instrumented library cannot be loaded into an
# uninstrumented interpreter without preloading the runtime.
file(GLOB BFIT_PY_TESTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/python/test_*.py)
foreach(t ${BFIT_PY_TESTS})
  get_filename_component(name ${t} NAME_WE)
  string(REGEX REPLACE "^test_" "python_" name ${name})
  if(BFIT_PYTHON)
    add_test(NAME ${name} COMMAND ${BFIT_PYTHON} ${PROJECT_SOURCE_DIR}/tests/python/run.py ${t}
             WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  else()
    add_test(NAME ${name} COMMAND sh -c "echo '${name}: /usr/bin/python3 not found: skipped'; exit 77")
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "python;nosan"
    ENVIRONMENT "BATCHFIT_LIB=$<TARGET_FILE:batchfit_shared>;BATCHFIT_CLI=$<TARGET_FILE:batchfit_cli>;PYTHONPATH=${PROJECT_SOURCE_DIR}/python;OMP_NUM_THREADS=2;PYTHONDONTWRITEBYTECODE=1")
endforeach()
# python_install.sh: cmake --install puts the package where /usr/bin/python3
# finds it under the prefix, and it loads the installed library
if(BFIT_PYTHON)
  add_test(NAME python_install COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/python_install.sh ${PROJECT_BINARY_DIR}
           ${BFIT_PYTHON})
  set_tests_properties(python_install PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS "python;nosan"
                       ENVIRONMENT "OMP_NUM_THREADS=2")
endif()
