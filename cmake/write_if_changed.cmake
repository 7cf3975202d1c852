# onceq_write_if_changed(PATH TEXT): writes TEXT to PATH unless PATH already
# holds exactly TEXT, so that a generated header that did not change keeps
# its timestamp and recompiles nothing. For the -P scripts beside it.
function(onceq_write_if_changed path text)
  set(old "")
  if(EXISTS ${path})
    file(READ ${path} old)
  endif()
  if(NOT old STREQUAL text)
    file(WRITE ${path} "${text}")
  endif()
endfunction()
