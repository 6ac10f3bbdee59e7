# embed.cmake - examples/embed.c built against the installed library with
# pkg-config and run (tests/cli/embed.sh).
add_test(NAME embed_installed
         COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/embed.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
# (not under the sanitizers: a plain cc cannot link the instrumented library)
set_tests_properties(embed_installed PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 600 LABELS nosan)
# exports.sh: the shared library exports exactly the public API
add_test(NAME exports COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/exports.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(exports PROPERTIES TIMEOUT 60 LABELS nosan)
