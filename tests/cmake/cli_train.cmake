# The train/eval commands end to end: exit codes, messages, tiny real runs
# (cli_train), and the longer runs (cli_train_more: recomputation, a token
# model at bf16); token models on texts (cli_tokens), on token files
# (cli_tokens_bin) and under --seq and --attention (cli_tokens_seq), a
# classifier on a folder of class folders of texts (cli_text_classes), BERT's
# masked-LM objective (cli_mlm): tests
# apart so that each stays under a minute under the sanitizers.
# Their figures (memory budgets, thread counts, f16 refused) are the CPU's:
# on a GPU machine CUDA_VISIBLE_DEVICES hides the GPU from --device auto
# (the H200 run of 2026-11-26 failed these checks there, not the GPU's work).
foreach(t train train_more tokens tokens_bin tokens_seq text_classes mlm)
  add_test(NAME cli_${t} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/${t}.sh $<TARGET_FILE:batchfit_cli>
           ${PROJECT_SOURCE_DIR})
  set_tests_properties(cli_${t} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2;CUDA_VISIBLE_DEVICES=" TIMEOUT 900
                       PASS_REGULAR_EXPRESSION "[0-9]+ passed, 0 failed")
endforeach()
