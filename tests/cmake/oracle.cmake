# oracle.cmake - PyTorch as the layers' oracle: the fixture test
# oracle_layers_gen writes the cases (tests/oracle/layer_oracle.py) into
# ${PROJECT_BINARY_DIR}/oracle/layers, and test_layers_torch requires it.
# Without /usr/bin/python3 and torch the generation FAILS, loudly: a missing
# oracle must not look like a pass.
set(BFIT_ORACLE_LAYERS_DIR ${PROJECT_BINARY_DIR}/oracle/layers)

if(BFIT_PYTHON)
  add_test(NAME oracle_layers_gen
           COMMAND ${BFIT_PYTHON} ${PROJECT_SOURCE_DIR}/tests/oracle/layer_oracle.py ${BFIT_ORACLE_LAYERS_DIR})
else()
  add_test(NAME oracle_layers_gen
           COMMAND sh -c "echo 'oracle_layers_gen: /usr/bin/python3 not found; the layer oracle needs it \
with PyTorch (apt-get install python3-torch)' >&2; exit 1")
endif()
set_tests_properties(oracle_layers_gen PROPERTIES FIXTURES_SETUP oracle_layers TIMEOUT 120)

if(TEST test_layers_torch)
  set_tests_properties(test_layers_torch PROPERTIES FIXTURES_REQUIRED oracle_layers)
endif()
