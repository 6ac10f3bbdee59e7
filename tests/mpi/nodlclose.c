/* nodlclose.c - preloaded into MPI processes in the sanitizer run only
 * (tests/cmake/mpi.cmake): Open MPI unloads its plugins at MPI_Finalize,
 * after which LeakSanitizer cannot name the plugin that made an allocation
 * Open MPI never frees, and tests/lsan-cuda.supp cannot suppress it. Kept
 * loaded, they are named (mca_*) and suppressed, and our own leaks still
 * show. */
int dlclose(void *handle);

int dlclose(void *handle)
{
    (void)handle;
    return 0;
}
