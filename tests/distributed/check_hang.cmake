# Runs dist_hang with NP ranks; the last rank stops itself after collective #2. Every other rank must report
# the all_reduce #3 timeout naming the stopped rank, its pid, and its last collective (#2 barrier). The stuck
# rank's state may read "process exited" instead of "process stopped" for a rank whose timeout fires a few
# milliseconds after the first one: that rank has exited by then and the launcher has killed the stopped one
# (seen under load at 3 ranks), or carry no state at all when the launcher, stopping the job, has already resumed
# the stopped rank (SIGCONT before its SIGTERM) but not yet ended it (seen once in the sanitized build at 3 ranks);
# which rank is stuck and where must be named in every case.
execute_process(
  COMMAND ${MPIEXEC} -np ${NP} --oversubscribe ${EXE}
  OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 45 RESULT_VARIABLE rc)
message(STATUS "exit: ${rc}\n${out}")
math(EXPR stuck "${NP} - 1")
string(REGEX MATCH "rank ${stuck}: pid ([0-9]+) entered" hit "${out}")
set(pid "${CMAKE_MATCH_1}")
if(NOT pid)
  message(FATAL_ERROR "rank ${stuck} never started.\nstdout:\n${out}\nstderr:\n${err}")
endif()
math(EXPR last "${NP} - 2")
foreach(r RANGE 0 ${last})
  string(CONCAT pattern "rank ${r}: caught: collective all_reduce \\(sequence #3\\) timed out[^\n]*"
         "Stuck: rank ${stuck} \\(pid ${pid} on [^,)]+(, process (stopped|exited))?\\) whose last collective is #2 "
         "barrier; "
         "this rank waits in #3")
  string(REGEX MATCH "${pattern}" named "${out}")
  if(NOT named)
    message(FATAL_ERROR "rank ${r} did not name the stopped rank ${stuck} and its last collective.\n"
            "stdout:\n${out}\nstderr:\n${err}")
  endif()
endforeach()
if(out MATCHES "UNEXPECTED")
  message(FATAL_ERROR "a rank completed a collective its stopped peer never joined:\n${out}")
endif()
if(rc MATCHES "timeout")
  message(FATAL_ERROR "the job hung: ${rc}")
endif()
