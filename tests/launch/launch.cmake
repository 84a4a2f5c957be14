# The launch/ scripts, tested on the CPU backend: the scaling workflow end to end (mpirun with 1 and 2
# ranks, oversubscribed) and its refusal of GPU counts the machine cannot serve.
# Included from tests/tests.cmake:  include(tests/launch/launch.cmake)
if(HAVE_MPI)
  add_test(NAME test_scaling
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/launch/test_scaling.sh $<TARGET_FILE:amptrain>
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_scaling PROPERTIES LABELS unit TIMEOUT 300)
endif()
