# `cpack -G DEB` in the build folder: one package, lockstep_<version>_<arch>.deb, holding what
# `cmake --install` installs, under /usr. Its Depends name the Debian 12 packages the programs load
# at run time (Open MPI and its mpiexec, HDF5 serial, Boost.Program_options, OpenBLAS, zlib, and
# oneDNN with libgomp when built with it). CUDA, cuBLAS and NCCL come from NVIDIA's installers,
# not Debian, so a CUDA build names them in its description instead. Building against the package
# needs the development packages of the same libraries: Suggests lists them.
set(CPACK_PACKAGE_NAME lockstep)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "Lockstep")
set(CPACK_PACKAGE_CONTACT "Lockstep maintainers <lockstep@localhost>")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(deb_depends "libc6 (>= 2.36), libstdc++6 (>= 12), libgcc-s1, libopenmpi3, openmpi-bin,"
                " libhdf5-103-1, libboost-program-options1.74.0, zlib1g")
set(deb_suggests "cmake, pkg-config, g++, libopenmpi-dev, libhdf5-dev, zlib1g-dev,"
                 " libboost-program-options-dev")
if(LOCKSTEP_BLAS_VENDOR STREQUAL "OpenBLAS")
  string(APPEND deb_depends ", libopenblas0 | libopenblas0-pthread")
  string(APPEND deb_suggests ", libopenblas-dev")
else()
  string(APPEND deb_depends ", libblas3 | libblas.so.3")
  string(APPEND deb_suggests ", libblas-dev")
endif()
if(LOCKSTEP_HAVE_LIBDEFLATE)
  string(APPEND deb_depends ", libdeflate0")
  string(APPEND deb_suggests ", libdeflate-dev")
endif()
if(LOCKSTEP_HAVE_ONEDNN)
  string(APPEND deb_depends ", libdnnl2, libgomp1")
  string(APPEND deb_suggests ", libdnnl-dev")
endif()
string(CONCAT CPACK_DEBIAN_PACKAGE_DEPENDS ${deb_depends})
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "hdf5-plugin-lzf, hdf5-filter-plugin")
string(CONCAT CPACK_DEBIAN_PACKAGE_SUGGESTS ${deb_suggests})
set(deb_summary "synchronous data-parallel training on MPI ranks")
# CPack indents the body under the summary and turns an empty line into " .".
set(deb_body "Lockstep trains models on MPI ranks, CPU or GPU, with all-reduced gradients:
lockstep-train, lockstep-data, lockstep-bench and lockstep-export, and the static libraries, headers,
CMake package (find_package(Lockstep)) and pkg-config files (lockstep.pc,
lockstep-train-cli.pc) to build programs against the runtime, or lockstep-train
with layers of their own (train_main).")
if(LOCKSTEP_HAVE_CUDA)
  set(cuda_dirs ${CUDAToolkit_LIBRARY_DIR} ${LOCKSTEP_NCCL_DIR})
  list(REMOVE_DUPLICATES cuda_dirs)
  string(REPLACE ";" ", " cuda_dirs "${cuda_dirs}")
  string(APPEND deb_body "

Built with CUDA and NCCL: needs the CUDA Toolkit's run-time libraries (libcudart,
libcublas, libcublasLt) and NCCL 2.x from NVIDIA, which are not Debian packages,
in the folders the programs were linked with (${cuda_dirs}) or on the library path.")
endif()
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${deb_summary}")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "${deb_body}")
include(CPack)
