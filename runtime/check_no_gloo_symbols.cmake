# Fails when LIB references gloo:: symbols directly (see runtime/CMakeLists.txt).
execute_process(COMMAND ${NM} -DC --undefined-only ${LIB}
                OUTPUT_VARIABLE _undef RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(WARNING "fsdp-opt: could not run nm on ${LIB}; skipping the gloo symbol check")
  return()
endif()
string(REGEX MATCHALL "[^\n]* gloo::[^\n]*" _hits "${_undef}")
if(_hits)
  string(REPLACE ";" "\n" _hits "${_hits}")
  message(FATAL_ERROR "fsdp-opt: ${LIB} calls gloo directly, which is unsafe when gloo headers do "
                      "not come from the torch package:\n${_hits}")
endif()
