# test_cpu_isa (a cmocka test, made by tests/CMakeLists.txt): its children
# and both variants of every dispatched loop take a few seconds
set_tests_properties(test_cpu_isa PROPERTIES TIMEOUT 60)
