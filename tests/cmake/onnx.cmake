# onnx.cmake - ONNX import checked against PyTorch on torchvision's models.
# The fixture tests onnx_export_NAME run tests/onnx/export.py, which exports
# NAME and writes PyTorch's answers into BFIT_ONNX_DIR (cached: nothing is
# redone while the script and torch stay the same); onnx_torch_NAME
# (tests/onnx/onnx_torch.c) requires it. Without torchvision both skip (77).
# scripts/test.sh gives the sanitizer build the Release build's directory:
# the exports are PyTorch's alone, and redoing them took 113 s of that pass.
set(BFIT_ONNX_DIR ${PROJECT_BINARY_DIR}/onnx CACHE PATH
    "where tests/onnx/export.py writes the models and PyTorch's answers (another build's may be shared)")
add_executable(onnx_torch ${CMAKE_CURRENT_SOURCE_DIR}/onnx/onnx_torch.c)
target_compile_options(onnx_torch PRIVATE ${BFIT_WARN})
target_link_libraries(onnx_torch PRIVATE bfit_testhelp)

foreach(name resnet18 mobilenet_v2 densenet121 resnet50_224 vit_small vit_b_16 act_cnn mobilenet_v3_small
             efficientnet_b0 pad_cnn pad_cnn_op9 param_act_cnn ceil_cnn prelu_cnn convnext_mini
             shufflenet_v2_x0_5 layerscale_mini mhsa_mini regnet_y_400mf squeezenet1_1 mnasnet0_5
             gn_cnn gpt_mini tgpt_mini gpt_bench gpt_long gpt_nobias llama_mini tut_mini tut_halves tut_learned
             hfgpt2_mini tut_seqfirst hfgpt2_mask distilbert_mini tgpt_kpm tenc_kpm hfbert_mini llama_mask
             distilbert_cls hfbert_cls meanpool_cls hfbert_cls_inputs hfgpt2_pos llama_pos gpt2_cls meanpool_mask roberta_cls shared_mlp llama_cls llama_442 gemma_mini gemma_wide qwen2_mini hfbert_tok)
  if(BFIT_PYTHON)
    add_test(NAME onnx_export_${name}
             COMMAND ${BFIT_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/export.py ${BFIT_ONNX_DIR} ${name})
  else()
    add_test(NAME onnx_export_${name}
             COMMAND sh -c "echo 'onnx_export: skipped: /usr/bin/python3 not found (scripts/setup.sh)'; exit 77")
  endif()
  set_tests_properties(onnx_export_${name} PROPERTIES FIXTURES_SETUP onnx_${name} TIMEOUT 120 SKIP_RETURN_CODE 77)
  add_test(NAME onnx_torch_${name} COMMAND onnx_torch ${name})
  # 5 to 30 s in a release build; more under the sanitizers and the device checking mode
  set_tests_properties(onnx_torch_${name} PROPERTIES FIXTURES_REQUIRED onnx_${name} TIMEOUT 240 SKIP_RETURN_CODE 77
    ENVIRONMENT "BFIT_ONNX_DIR=${BFIT_ONNX_DIR};BFIT_SOURCE_DIR=${PROJECT_SOURCE_DIR};BFIT_PYTHON=${BFIT_PYTHON};OMP_NUM_THREADS=2"
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
endforeach()
# DenseNet's 430 layers under the checking mode (every op opens its blocks) took 8 minutes on a loaded
# machine; it passed there, and the other three models keep the mode's coverage of the ONNX layers
set_tests_properties(onnx_torch_densenet121 PROPERTIES LABELS nocheck)
# vit_b_16 (86M parameters) took 140 s under the checking mode on a loaded machine (20-30 s without); it
# passed there, and vit_small keeps the mode's coverage of every ViT layer and op
set_tests_properties(onnx_torch_vit_b_16 PROPERTIES LABELS nocheck)

# the reader and importer on damaged files, and the new layers (tests/test_onnx.c)
if(TEST test_onnx)
  set_tests_properties(test_onnx PROPERTIES TIMEOUT 60)
endif()

# the command line on committed ONNX files (no torch needed): tests/cli/onnx.sh
find_program(BFIT_BASH bash REQUIRED)
add_test(NAME cli_onnx
         COMMAND ${BFIT_BASH} ${PROJECT_SOURCE_DIR}/tests/cli/onnx.sh $<TARGET_FILE:batchfit_cli> ${PROJECT_SOURCE_DIR})
# 50 s under the sanitizers and checking mode on a quiet machine, 120 on a loaded one (2026-12-06)
set_tests_properties(cli_onnx PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300
                     PASS_REGULAR_EXPRESSION "all ONNX CLI checks passed")
