# cmake -DIN=runtime/<wing>/x.h -DOUT=<stage>/lockstep/<wing>/x.h -P stage_header.cmake
# Copies a public header, rewriting its project includes to their installed paths:
# "runtime/<wing>/y.h" -> <lockstep/<wing>/y.h>, "kernels/y.h" -> <lockstep/kernels/y.h> and
# "kernels/<family>/y.h" -> <lockstep/kernels/<family>/y.h>.
# Writes only when the result changed, so a rebuild recompiles nothing that includes it.
file(READ "${IN}" text)
string(REGEX REPLACE "#include \"runtime/([^\"]+)\"" "#include <lockstep/\\1>" text "${text}")
string(REGEX REPLACE "#include \"kernels/([^\"]+)\"" "#include <lockstep/kernels/\\1>" text "${text}")
if(text MATCHES "#include \"")
  message(FATAL_ERROR "${IN}: a quoted include that is not runtime/ or kernels/ has no installed path")
endif()
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
