# The zoo's CTests (docs/zoo.md): every program with --check on the CPU (finite-difference gradients and the loss
# falling by its stated margin), labelled "examples;zoo" (ctest -L zoo). Each takes 1-30 s on 2 cores.
get_property(_zoo_models GLOBAL PROPERTY VOLT_ZOO_MODELS)
foreach(model ${_zoo_models})
  if(TARGET zoo_${model})
    add_test(NAME zoo_${model} COMMAND zoo_${model} --check --accelerator cpu)
    set_tests_properties(zoo_${model} PROPERTIES TIMEOUT 300 LABELS "examples;zoo")
  endif()
endforeach()
if(TARGET zoo_check_selftest)
  add_test(NAME zoo_check_selftest COMMAND zoo_check_selftest)
  set_tests_properties(zoo_check_selftest PROPERTIES TIMEOUT 60 LABELS "examples;zoo")
endif()
