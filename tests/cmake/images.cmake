# images.cmake - image folders: tests/oracle/img_oracle.py compares the
# library's decoding and transforms (through tests/tools/img_dump.c) with
# PIL's and torchvision's on files that scripts/img_folders.py writes;
# tests/cli/images.sh trains on generated folders through the CLI;
# tests/cli/img_classes.sh checks test folders' classes, list files and names.
add_executable(img_dump ${CMAKE_CURRENT_SOURCE_DIR}/tools/img_dump.c)
target_compile_options(img_dump PRIVATE ${BFIT_WARN})
target_link_libraries(img_dump PRIVATE batchfit)
target_include_directories(img_dump PRIVATE ${PROJECT_SOURCE_DIR}/src)
add_test(NAME img_oracle COMMAND ${BFIT_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/oracle/img_oracle.py $<TARGET_FILE:img_dump>
                                 ${PROJECT_SOURCE_DIR})
set_tests_properties(img_oracle PROPERTIES TIMEOUT 300 PASS_REGULAR_EXPRESSION "img_oracle: all [0-9]+ checks passed")
add_test(NAME cli_images COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/images.sh $<TARGET_FILE:batchfit_cli>
                                 ${PROJECT_SOURCE_DIR} ${BFIT_PYTHON})
set_tests_properties(cli_images PROPERTIES TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=2"
                     PASS_REGULAR_EXPRESSION "[0-9]+ passed, 0 failed")
set_tests_properties(test_images PROPERTIES TIMEOUT 300)
add_test(NAME cli_img_classes COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/img_classes.sh $<TARGET_FILE:batchfit_cli>
                                      ${PROJECT_SOURCE_DIR} ${BFIT_PYTHON})
set_tests_properties(cli_img_classes PROPERTIES TIMEOUT 120 ENVIRONMENT "OMP_NUM_THREADS=2"
                     PASS_REGULAR_EXPRESSION "[0-9]+ passed, 0 failed")
