# The launch/ scripts and the install, tested on the CPU backend, each in its own scratch folder:
#   test_scaling       the scaling workflow end to end (mpirun with 1 and 2 ranks, oversubscribed) and its
#                      refusal of rank counts the machine cannot serve
#   test_signals       amptrain-mpirun's process group sent SIGTERM (exit 0, checkpoint), scaling sent
#                      SIGTERM (exit 143, no process left)
#   test_compare_amp   launch/compare-amp configs/tiny.yaml (shortened): both rows, the CSV, the PNG
#   test_plot_metrics  launch/plot-metrics over two runs, and its refusals
#   test_criteria      dev/criteria.py (the device suite's check of the training loop's targets) on rows
#                      that meet them, miss one, lack repeats or are not JSON; its seed row from a real run;
#                      the fused bars; dev/kernel_profile.py's row of a profiled step
#   test_sbatch        launch/amptrain.sbatch under stand-ins for srun, mpirun and scontrol: SIGUSR1 passed to
#                      the step, requeue after a clean stop only, the srun/mpirun command lines, usage errors
#   test_python        AMPTRAIN_PYTHON chooses the scripts' interpreter; a missing module names it; bad
#                      arguments to every launch/ and tools/ script: exit 2, no traceback, nothing written
#   test_install       cmake --install into the scratch folder, then the installed amptrain and scripts
# Included from tests/tests.cmake:  include(tests/launch/launch.cmake)
#
# The scripts run under AMPTRAIN_TEST_PYTHON: the first of python3 on PATH and /usr/bin/python3 that has
# matplotlib (Debian's python3-matplotlib belongs to /usr/bin/python3, which a pyenv or conda python3
# first on PATH hides), else python3 on PATH. Without matplotlib the tests check that the scripts still
# write their tables and say why there is no PNG; with it, the PNGs too. Either way each test also hides
# matplotlib once, to check that path.
find_program(AMPTRAIN_PATH_PYTHON3 python3)
if(NOT AMPTRAIN_TEST_PYTHON)
  foreach(py ${AMPTRAIN_PATH_PYTHON3} /usr/bin/python3)
    execute_process(COMMAND ${py} -c "import matplotlib" RESULT_VARIABLE no_mpl OUTPUT_QUIET ERROR_QUIET)
    if(no_mpl EQUAL 0)
      set(AMPTRAIN_TEST_PYTHON ${py} CACHE FILEPATH "Python 3 that runs the launch scripts in the tests")
      break()
    endif()
  endforeach()
  if(NOT AMPTRAIN_TEST_PYTHON)
    set(AMPTRAIN_TEST_PYTHON ${AMPTRAIN_PATH_PYTHON3} CACHE FILEPATH "Python 3 that runs the launch scripts in the tests")
  endif()
endif()
execute_process(COMMAND ${AMPTRAIN_TEST_PYTHON} -c "import matplotlib" RESULT_VARIABLE no_mpl OUTPUT_QUIET ERROR_QUIET)
if(no_mpl EQUAL 0)
  message(STATUS "amptrain: launch tests run ${AMPTRAIN_TEST_PYTHON} (matplotlib found: the PNGs are checked)")
else()
  message(STATUS "amptrain: launch tests run ${AMPTRAIN_TEST_PYTHON} (matplotlib not found: the no-PNG path is checked; Debian: python3-matplotlib)")
endif()

function(amptrain_add_launch_test name)
  set(scratch ${CMAKE_BINARY_DIR}/test-scratch/${name})
  file(MAKE_DIRECTORY ${scratch})
  add_test(NAME ${name} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/launch/${name}.sh ${ARGN} WORKING_DIRECTORY ${scratch})
  # no __pycache__ folders in the source tree (launch/amptrain_report.py is imported from there)
  set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT 300
                       ENVIRONMENT "PYTHON=${AMPTRAIN_TEST_PYTHON};PYTHONDONTWRITEBYTECODE=1")
endfunction()

amptrain_add_launch_test(test_compare_amp $<TARGET_FILE:amptrain>)
amptrain_add_launch_test(test_plot_metrics $<TARGET_FILE:amptrain>)
amptrain_add_launch_test(test_criteria $<TARGET_FILE:amptrain>)
amptrain_add_launch_test(test_sbatch)
amptrain_add_launch_test(test_python $<TARGET_FILE:amptrain>)
if(HAVE_MPI)
  amptrain_add_launch_test(test_scaling $<TARGET_FILE:amptrain>)
  amptrain_add_launch_test(test_signals $<TARGET_FILE:amptrain>)
  amptrain_add_launch_test(test_install ${CMAKE_COMMAND} ${CMAKE_BINARY_DIR})
endif()
