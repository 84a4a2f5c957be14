# One Check executable per tests/<label>/test_*.c, labelled by its folder:
#   unit  CPU only, forked Check runner; exit 77 is Skipped (test_images_pil without Pillow)
#   mpi   CPU backend under mpiexec with 1, 2 and 3 ranks (CK_FORK=no); the suites that start MPI jobs of
#         their own (AMPTRAIN_TEST_OWN_LAUNCH) run once, without mpiexec, since a job cannot nest in another;
#         test_startup runs its MPMD jobs from the 1-rank launch and exits 77 (Skipped) in the others
#   gpu   CUDA backend; without a GPU each test prints why and exits 77, which ctest reports as Skipped
# Tests run in their own scratch folder under the build tree (each binary moves there itself before main,
# so one started from anywhere writes nothing elsewhere), and find the binary, the sources and the
# configs through compile definitions.
set(AMPTRAIN_TEST_MPI_RANKS 1 2 3)
set(AMPTRAIN_TEST_OWN_LAUNCH test_comm_faults test_fault_trainer test_images_stop_ranks)

# A read that never comes back, preloaded into amptrain by the test_images_stop suites (tests/stall_read.c).
add_library(stall_read MODULE tests/stall_read.c)
target_link_libraries(stall_read PRIVATE ${CMAKE_DL_LIBS})

function(amptrain_add_check_test label src)
  get_filename_component(name ${src} NAME_WE)
  # The image suites make their JPEG fixtures with libjpeg-turbo: built only where it was found.
  if(name MATCHES "^test_images" AND NOT TURBOJPEG_FOUND)
    return()
  endif()
  add_executable(${name} ${src} tests/test_util.c)
  if(name MATCHES "^test_images")
    target_sources(${name} PRIVATE tests/image_fixtures.c)
  endif()
  if(name MATCHES "^test_images_stop")
    target_sources(${name} PRIVATE tests/stall_run.c)
    target_compile_definitions(${name} PRIVATE AMPTRAIN_STALL_READ="$<TARGET_FILE:stall_read>")
    add_dependencies(${name} stall_read)
  endif()
  target_link_libraries(${name} PRIVATE amptrain_lib PkgConfig::CHECK)
  # The GPU suites compare large fp16 buffers with the CPU reference element by element on the host.
  target_compile_options(${name} PRIVATE ${AMPTRAIN_F16C_OPTION})
  set(workdir ${CMAKE_BINARY_DIR}/test-scratch/${name})
  target_compile_definitions(${name} PRIVATE
    AMPTRAIN_BIN="$<TARGET_FILE:amptrain>"
    AMPTRAIN_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    AMPTRAIN_TEST_SCRATCH="${workdir}")
  add_dependencies(${name} amptrain)
  file(MAKE_DIRECTORY ${workdir})
  if(label STREQUAL "mpi")
    if(NOT HAVE_MPI)
      return()
    endif()
    if(name IN_LIST AMPTRAIN_TEST_OWN_LAUNCH)
      add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${workdir})
      set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 600 SKIP_RETURN_CODE 77)
      return()
    endif()
    # An earlier ctest's leftovers go before the first rank count runs (the ranks never empty it themselves).
    add_test(NAME ${name}_scratch COMMAND sh -c "rm -rf '${workdir}' && mkdir -p '${workdir}'")
    set_tests_properties(${name}_scratch PROPERTIES LABELS mpi FIXTURES_SETUP ${name}_scratch)
    foreach(np ${AMPTRAIN_TEST_MPI_RANKS})
      add_test(NAME ${name}_np${np}
               COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe ${MPIEXEC_NUMPROC_FLAG} ${np}
                       $<TARGET_FILE:${name}>
               WORKING_DIRECTORY ${workdir})
      # The rank counts of one suite share its scratch folder (its run folders, their locks): one at a time
      # under ctest -j.
      set_tests_properties(${name}_np${np} PROPERTIES LABELS mpi ENVIRONMENT "CK_FORK=no" TIMEOUT 600
                           SKIP_RETURN_CODE 77 RESOURCE_LOCK ${name} FIXTURES_REQUIRED ${name}_scratch)
    endforeach()
  else()
    add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${workdir})
    if(label STREQUAL "gpu")
      set_tests_properties(${name} PROPERTIES LABELS gpu ENVIRONMENT "CK_FORK=no" TIMEOUT 900 SKIP_RETURN_CODE 77)
    else()
      set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT 600 SKIP_RETURN_CODE 77)
    endif()
  endif()
endfunction()

foreach(label unit mpi gpu)
  file(GLOB srcs CONFIGURE_DEPENDS tests/${label}/test_*.c)
  foreach(src ${srcs})
    amptrain_add_check_test(${label} ${src})
  endforeach()
endforeach()
include(tests/launch/launch.cmake)
