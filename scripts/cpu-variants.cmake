# Included into llama-cpp-python's top-level CMake project (CMAKE_PROJECT_llama_cpp_INCLUDE) by
# scripts/install-runtime.sh. Two jobs, both from the one source tree the wheel is built from:
#  * llama-cpp-python installs a fixed list of libraries, so the CPU variant modules that
#    GGML_CPU_ALL_VARIANTS builds would stay behind in the build tree: install them into
#    llama_cpp/lib, where localchat picks the best one this CPU can run (runtime/backends.py).
#  * the deterministic mode needs CPU kernels without llamafile's sgemm (it serves only batches of
#    two or more rows, so a token rounds differently alone than beside others): build the variant
#    modules a second time with GGML_LLAMAFILE=OFF into llama_cpp/lib/exact.
include(ExternalProject)

cmake_language(DEFER CALL localchat_cpu_variants)

function(localchat_cpu_variants)
    set(ggml_src "${CMAKE_SOURCE_DIR}/vendor/llama.cpp/ggml/src")
    get_property(targets DIRECTORY "${ggml_src}" PROPERTY BUILDSYSTEM_TARGETS)
    set(variants "")
    foreach(target IN LISTS targets)
        if(target MATCHES "^ggml-cpu-")
            llama_cpp_python_install_target(${target})
            # The exact set keeps to the common ISA levels: it is the opt-in mode, and each
            # variant costs a compile of the CPU backend. It also leaves out the ARM variants with
            # int8 matrix multiply: their 2x2 kernels serve even row counts only, so results
            # would depend on the batch (as AMX tiles do on x86).
            if(NOT target MATCHES "ivybridge|piledriver|cannonlake|cascadelake|cooperlake|zen4|sapphirerapids|armv8[.]6|armv9|apple_m2|apple_m4")
                list(APPEND variants ${target})
            endif()
        endif()
    endforeach()
    if(NOT variants)
        return()  # not a GGML_CPU_ALL_VARIANTS build
    endif()
    set(build_targets "")
    foreach(target IN LISTS variants)
        list(APPEND build_targets --target ${target})
    endforeach()
    # The same compilers and targets as the wheel's own build.
    set(forwarded "")
    foreach(var CMAKE_C_COMPILER CMAKE_CXX_COMPILER CMAKE_TOOLCHAIN_FILE CMAKE_OSX_ARCHITECTURES
                CMAKE_OSX_DEPLOYMENT_TARGET CMAKE_MSVC_RUNTIME_LIBRARY)
        if(DEFINED ${var} AND NOT "${${var}}" STREQUAL "")
            list(APPEND forwarded "-D${var}:STRING=${${var}}")
        endif()
    endforeach()
    ExternalProject_Add(localchat_exact_cpu
        SOURCE_DIR "${CMAKE_SOURCE_DIR}/vendor/llama.cpp"
        BINARY_DIR "${CMAKE_BINARY_DIR}/exact-cpu"
        # No runtime path at all: the modules link libggml-base (and OpenMP) by soname, which the
        # loader finds already in the process (the wheel's own copy, same source and flags) or in
        # the system's folders, never in a deleted build tree or the current folder.
        CMAKE_CACHE_ARGS ${forwarded} -DCMAKE_BUILD_TYPE:STRING=Release -DBUILD_SHARED_LIBS:BOOL=ON
                   -DCMAKE_SKIP_RPATH:BOOL=ON -DGGML_BACKEND_DL:BOOL=ON -DGGML_CPU_ALL_VARIANTS:BOOL=ON
                   -DGGML_NATIVE:BOOL=OFF -DGGML_LLAMAFILE:BOOL=OFF -DLLAMA_CURL:BOOL=OFF
                   -DLLAMA_BUILD_TESTS:BOOL=OFF -DLLAMA_BUILD_TOOLS:BOOL=OFF
                   -DLLAMA_BUILD_EXAMPLES:BOOL=OFF -DLLAMA_BUILD_SERVER:BOOL=OFF
        BUILD_COMMAND ${CMAKE_COMMAND} --build . --config Release --parallel ${build_targets}
        INSTALL_COMMAND ""
        STEP_TARGETS build)
    # Single-config generators put the modules in bin/, multi-config ones (Visual Studio) in bin/Release/.
    foreach(folder bin bin/Release)
        install(DIRECTORY "${CMAKE_BINARY_DIR}/exact-cpu/${folder}/"
                DESTINATION "${SKBUILD_PLATLIB_DIR}/llama_cpp/lib/exact"
                OPTIONAL FILES_MATCHING PATTERN "*ggml-cpu-*")
    endforeach()
endfunction()
