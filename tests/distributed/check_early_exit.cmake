# Runs dist_early_exit with 3 ranks; the last rank exits early. The surviving ranks must report a clear
# collective timeout (3 s) instead of hanging. --enable-recovery keeps mpirun from killing the survivors as soon
# as the peer vanishes, so that Volt's own timeout path is what gets exercised.
execute_process(
  COMMAND ${MPIEXEC} -np 3 --oversubscribe --enable-recovery ${EXE}
  OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 45 RESULT_VARIABLE rc)
message(STATUS "exit: ${rc}\n${out}")
foreach(r 0 1)
  string(REGEX MATCH "rank ${r}: caught: collective all_reduce \\(sequence #2\\) timed out[^\n]*not all ranks called it"
         hit "${out}")
  if(NOT hit)
    message(FATAL_ERROR "rank ${r} did not report the all_reduce timeout.\nstdout:\n${out}\nstderr:\n${err}")
  endif()
  # The report names the rank that went missing (same host: its process is checked).
  string(REGEX MATCH "rank ${r}: caught: [^\n]*Missing: [^\n]*rank 2 \\(pid [0-9]+ on [^)]+\\)" named "${out}")
  if(NOT named)
    message(FATAL_ERROR "rank ${r} did not name the exited rank 2.\nstdout:\n${out}")
  endif()
endforeach()
if(out MATCHES "UNEXPECTED")
  message(FATAL_ERROR "a rank completed a collective its peer never joined:\n${out}")
endif()
if(rc MATCHES "timeout")
  message(FATAL_ERROR "the job hung: ${rc}")
endif()
