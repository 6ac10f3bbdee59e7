/* empty.c - keeps the helper library non-empty. */
typedef int bfit_test_empty_unit;
