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
            # variant costs a compile of the CPU backend.
            if(NOT target MATCHES "ivybridge|piledriver|cannonlake|cascadelake|cooperlake|zen4|sapphirerapids")
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
    ExternalProject_Add(localchat_exact_cpu
        SOURCE_DIR "${CMAKE_SOURCE_DIR}/vendor/llama.cpp"
        BINARY_DIR "${CMAKE_BINARY_DIR}/exact-cpu"
        CMAKE_ARGS -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON
                   -DGGML_CPU_ALL_VARIANTS=ON -DGGML_NATIVE=OFF -DGGML_LLAMAFILE=OFF
                   -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF
                   -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
        BUILD_COMMAND ${CMAKE_COMMAND} --build . --config Release ${build_targets}
        INSTALL_COMMAND ""
        STEP_TARGETS build)
    # The modules link libggml-base by its soname: loaded after llama_cpp, they bind to the
    # wheel's own copy already in the process (same source, same flags).
    install(DIRECTORY "${CMAKE_BINARY_DIR}/exact-cpu/bin/"
            DESTINATION "${SKBUILD_PLATLIB_DIR}/llama_cpp/lib/exact"
            FILES_MATCHING PATTERN "*ggml-cpu-*")
endfunction()
