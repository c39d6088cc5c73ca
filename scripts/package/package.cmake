# Lockstep as a library (DESIGN.md decision 17): `cmake --install` puts the programs, the three
# static libraries, the public headers under include/lockstep/<wing>/, a CMake package
# (Lockstep::lockstep, Lockstep::runtime, Lockstep::kernels, and Lockstep::train_cli as a component)
# with lockstep.pc and lockstep-train-cli.pc; `cpack -G DEB` makes a Debian package of the same.
# Included from the top CMakeLists.txt after the targets exist.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
set(package_dir ${PROJECT_SOURCE_DIR}/scripts/package)
set(cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Lockstep)

# ---- Public headers ----
# Every header of runtime/'s wings and of kernels/, except the few that include CUDA, NCCL or oneDNN
# headers (they serve the twins' implementation files only) and the MPI backend's internals
# (mpi_inline.h, mpi_ops.h: comm_mpi.cpp's own), the dataset reader's h5_read.h and
# dataset_split.h and the kernels' parallel.h; and apps/train_cli.h, train_main's, as
# <lockstep/train_cli.h>. Each is staged with its includes rewritten from "runtime/<wing>/x.h" and
# "kernels/x.h" or "kernels/<family>/x.h" to <lockstep/<wing>/x.h> and <lockstep/kernels/x.h> or
# <lockstep/kernels/<family>/x.h>, the paths they have once installed (stage_header.cmake); a
# family folder of kernels/ (conv/, gpt/, cuda/, onednn/) keeps its place under
# include/lockstep/kernels/. tests/public_headers_test.sh reads this list too.
set(LOCKSTEP_PRIVATE_HEADERS runtime/base/cuda_check.h runtime/comm/nccl_watchdog.h
    runtime/comm/mpi_inline.h runtime/comm/mpi_ops.h runtime/data/h5_read.h
    runtime/data/dataset_split.h kernels/parallel.h
    kernels/cuda/check.h kernels/cuda/cublas_handle.h kernels/onednn/util.h
    runtime/train/trainer_impl.h)
file(GLOB_RECURSE public_headers CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}
     ${PROJECT_SOURCE_DIR}/runtime/*.h ${PROJECT_SOURCE_DIR}/kernels/*.h)
list(REMOVE_ITEM public_headers ${LOCKSTEP_PRIVATE_HEADERS})
list(APPEND public_headers apps/train_cli.h)
set(stage ${PROJECT_BINARY_DIR}/package/include)
set(staged "")
foreach(header ${public_headers})
  string(REGEX REPLACE "^(runtime|apps)/" "" installed ${header})
  set(out ${stage}/lockstep/${installed})
  add_custom_command(OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DIN=${PROJECT_SOURCE_DIR}/${header} -DOUT=${out}
            -P ${package_dir}/stage_header.cmake
    DEPENDS ${PROJECT_SOURCE_DIR}/${header} ${package_dir}/stage_header.cmake VERBATIM)
  list(APPEND staged ${out})
endforeach()
add_custom_target(lockstep_headers ALL DEPENDS ${staged})
install(DIRECTORY ${stage}/lockstep ${PROJECT_BINARY_DIR}/include/lockstep
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# ---- Programs and libraries ----
# The programs keep the non-system folders they linked from (the CUDA Toolkit's, NCCL's) as their
# run path, so an installed CUDA build finds libcudart and libnccl.
set_target_properties(lockstep-train lockstep-data lockstep-bench lockstep-export lockstep-generate lockstep-predict PROPERTIES
                      INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS lockstep-train lockstep-data lockstep-bench lockstep-export lockstep-generate lockstep-predict RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
add_library(lockstep INTERFACE)
target_link_libraries(lockstep INTERFACE lockstep_runtime)
add_library(Lockstep::lockstep ALIAS lockstep)
set_target_properties(lockstep_runtime PROPERTIES EXPORT_NAME runtime)
set_target_properties(lockstep_kernels PROPERTIES EXPORT_NAME kernels)
install(TARGETS lockstep lockstep_runtime lockstep_kernels EXPORT LockstepTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# train_main, the whole of lockstep-train (<lockstep/train_cli.h>), in an export set of its own: its
# library links Boost.Program_options, which the config looks for only when train_cli is asked for.
set_target_properties(lockstep_train_cli PROPERTIES EXPORT_NAME train_cli)
install(TARGETS lockstep_train_cli EXPORT LockstepTrainCliTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})

# ---- CMake package ----
# Facts the config needs to find again what the static libraries link: the BLAS vendor, and the
# folders libdeflate, oneDNN, NCCL and cuDNN came from (found by path, as here; LOCKSTEP_CUDNN_DIR is set where
# cuDNN is found).
set(LOCKSTEP_BLA_VENDOR "${BLA_VENDOR}")
set(LOCKSTEP_DNNL_DIR "")
if(LOCKSTEP_HAVE_ONEDNN)
  get_filename_component(LOCKSTEP_DNNL_DIR "${DNNL_LIBRARY}" DIRECTORY)
endif()
set(LOCKSTEP_LIBDEFLATE_DIR "")
if(LOCKSTEP_HAVE_LIBDEFLATE)
  get_filename_component(LOCKSTEP_LIBDEFLATE_DIR "${LIBDEFLATE_LIBRARY}" DIRECTORY)
endif()
set(LOCKSTEP_NCCL_DIR "")
if(LOCKSTEP_HAVE_CUDA)
  get_filename_component(LOCKSTEP_NCCL_DIR "${NCCL_LIBRARY}" DIRECTORY)
endif()
install(EXPORT LockstepTargets NAMESPACE Lockstep:: DESTINATION ${cmake_dir})
install(EXPORT LockstepTrainCliTargets NAMESPACE Lockstep:: DESTINATION ${cmake_dir})
configure_package_config_file(${package_dir}/LockstepConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/LockstepConfig.cmake INSTALL_DESTINATION ${cmake_dir})
# 0.x: a minor release may change the API, so find_package(Lockstep 0.2) accepts 0.2.* only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/LockstepConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/LockstepConfig.cmake
        ${PROJECT_BINARY_DIR}/package/LockstepConfigVersion.cmake DESTINATION ${cmake_dir})

# ---- pkg-config ----
# Static libraries: Libs carries everything they link, after them. MPI, HDF5, zlib and OpenBLAS
# come through their own .pc files (Debian has them); libdeflate, oneDNN, the OpenMP runtime and CUDA
# do not.
set(LOCKSTEP_PC_REQUIRES "mpi-c hdf5 zlib")
if(LOCKSTEP_BLAS_VENDOR STREQUAL "OpenBLAS")
  string(APPEND LOCKSTEP_PC_REQUIRES " openblas")
else()
  string(APPEND LOCKSTEP_PC_REQUIRES " blas")
endif()
set(LOCKSTEP_PC_LIBS "")
set(LOCKSTEP_PC_CFLAGS "-DOMPI_SKIP_MPICXX=1 -DMPICH_SKIP_MPICXX=1")
if(LOCKSTEP_HAVE_LIBDEFLATE)
  string(APPEND LOCKSTEP_PC_LIBS " -L${LOCKSTEP_LIBDEFLATE_DIR} -ldeflate")
endif()
if(LOCKSTEP_HAVE_ONEDNN)
  string(APPEND LOCKSTEP_PC_LIBS " -L${LOCKSTEP_DNNL_DIR} -ldnnl -lgomp")
endif()
if(LOCKSTEP_HAVE_CUDA)
  string(APPEND LOCKSTEP_PC_LIBS " -L${CUDAToolkit_LIBRARY_DIR} -lcublas -lcublasLt -lcudart"
                                 " -L${LOCKSTEP_NCCL_DIR} -lnccl")
  string(APPEND LOCKSTEP_PC_CFLAGS " -DLOCKSTEP_HAVE_CUDA=1")
endif()
if(LOCKSTEP_HAVE_CUDNN)
  string(APPEND LOCKSTEP_PC_LIBS " -L${LOCKSTEP_CUDNN_DIR} -lcudnn")
endif()
string(APPEND LOCKSTEP_PC_LIBS " -ldl -pthread")
file(RELATIVE_PATH LOCKSTEP_PC_UP /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${package_dir}/lockstep.pc.in ${PROJECT_BINARY_DIR}/package/lockstep.pc @ONLY)
# train_main's library: lockstep's flags and libraries after its own, and Boost.Program_options,
# which has no .pc file on Debian.
configure_file(${package_dir}/lockstep-train-cli.pc.in
               ${PROJECT_BINARY_DIR}/package/lockstep-train-cli.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/lockstep.pc
        ${PROJECT_BINARY_DIR}/package/lockstep-train-cli.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

include(${package_dir}/deb.cmake)
