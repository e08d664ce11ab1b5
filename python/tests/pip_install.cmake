# cmake -DPYTHON=... -DSOURCE=<repo>/python -DWORK=<dir> -P pip_install.cmake
# Installs the package with pip the way a user does (`pip install ./python`), but into
# WORK/site (--target) instead of the interpreter's site-packages, and from a copy of the
# source, since setuptools writes build/ and *.egg-info next to pyproject.toml. Offline:
# --no-build-isolation uses the interpreter's own setuptools.
file(REMOVE_RECURSE "${WORK}/src" "${WORK}/site")
file(MAKE_DIRECTORY "${WORK}/src")
file(COPY "${SOURCE}/pyproject.toml" "${SOURCE}/README.md" "${SOURCE}/fsdp_opt"
     DESTINATION "${WORK}/src" PATTERN "__pycache__" EXCLUDE)
execute_process(
  COMMAND "${PYTHON}" -m pip install --no-build-isolation --no-deps --no-index
          --disable-pip-version-check --root-user-action=ignore --quiet
          --target "${WORK}/site" "${WORK}/src"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pip install of ${SOURCE} with ${PYTHON} failed (exit ${rc})")
endif()
if(NOT EXISTS "${WORK}/site/fsdp_opt/__init__.py")
  message(FATAL_ERROR "pip install did not put fsdp_opt/ into ${WORK}/site")
endif()
message(STATUS "fsdp_opt installed into ${WORK}/site")
