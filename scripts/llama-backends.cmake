# Included into llama-cpp-python's top-level CMake project (CMAKE_PROJECT_llama_cpp_INCLUDE) by
# scripts/install-runtime.sh, which passes the variants to build (scripts/native_variants.py) as
# comma lists: LOCALCHAT_FAST_VARIANTS (llamafile's sgemm on) and LOCALCHAT_EXACT_VARIANTS (off), and
# the GPU backends' own flags (scripts/gpu_backends.py: GGML_CUDA, GGML_VULKAN), built by the wheel's
# own tree as modules that llama-cpp-python installs into llama_cpp/lib.
#  * Vulkan headers older than VK_EXT_layer_settings stop ggml-vulkan.cpp in one block: the backend
#    is compiled with scripts/vulkan-layer-settings.h first, which supplies those types only where
#    the headers lack them.
#  * llama-cpp-python installs a fixed list of libraries, so the CPU variant modules that
#    GGML_CPU_ALL_VARIANTS builds (every variant: a bundle, CI) would stay behind in the build tree:
#    install them into llama_cpp/lib, where localchat picks the best one this CPU can run
#    (runtime/backends/kernels.py).
#  * a native install builds no CPU backend in the wheel's own tree (GGML_CPU=OFF): a second tree
#    configured with every variant builds only the fast ones named, into llama_cpp/lib.
#  * the deterministic mode needs CPU kernels without llamafile's sgemm (it serves only batches of
#    two or more rows, so a token rounds differently alone than beside others): a third tree builds
#    the exact ones named into llama_cpp/lib/exact.
include(ExternalProject)

cmake_language(DEFER CALL localchat_cpu_variants)
set(LOCALCHAT_VULKAN_SHIM "${CMAKE_CURRENT_LIST_DIR}/vulkan-layer-settings.h")
cmake_language(DEFER CALL localchat_vulkan_headers)

function(localchat_vulkan_headers)
    set(shim "${LOCALCHAT_VULKAN_SHIM}")
    if(TARGET ggml-vulkan)
        if(MSVC)
            target_compile_options(ggml-vulkan PRIVATE "/FI${shim}")
        else()
            target_compile_options(ggml-vulkan PRIVATE "SHELL:-include \"${shim}\"")
        endif()
    endif()
endfunction()

function(localchat_cpu_variants)
    # llama-cpp-python forces llama.cpp's common library on (its multimodal tools use it); the wheel
    # installs nothing of it and localchat calls libllama alone, so it is not compiled.
    if(TARGET common)
        set_target_properties(common PROPERTIES EXCLUDE_FROM_ALL TRUE)
    endif()
    if(NOT GGML_BACKEND_DL)
        return()  # the CPU backend is built into libggml: nothing to choose at run time
    endif()
    set(ggml_src "${CMAKE_SOURCE_DIR}/vendor/llama.cpp/ggml/src")
    get_property(targets DIRECTORY "${ggml_src}" PROPERTY BUILDSYSTEM_TARGETS)
    set(built_here FALSE)
    foreach(target IN LISTS targets)
        if(target MATCHES "^ggml-cpu-")
            llama_cpp_python_install_target(${target})
            set(built_here TRUE)
        endif()
    endforeach()
    string(REPLACE "," ";" fast "${LOCALCHAT_FAST_VARIANTS}")
    string(REPLACE "," ";" exact "${LOCALCHAT_EXACT_VARIANTS}")
    if(NOT built_here AND NOT GGML_CPU AND fast)
        localchat_variant_tree(fast ON "" "${fast}")
    elseif(NOT built_here)
        return()  # one CPU backend of the wheel's own (a build of other flags): no variants to pair
    endif()
    if(exact)
        localchat_variant_tree(exact OFF "/exact" "${exact}")
    endif()
endfunction()

# A tree of its own configured with every CPU variant (configuring is quick), building only the
# modules named: NAME, GGML_LLAMAFILE, the folder under llama_cpp/lib, the variants.
function(localchat_variant_tree name llamafile folder variants)
    set(build_targets "")
    foreach(variant IN LISTS variants)
        list(APPEND build_targets --target ggml-cpu-${variant})
    endforeach()
    # The same compilers and targets as the wheel's own build.
    set(forwarded "")
    foreach(var CMAKE_C_COMPILER CMAKE_CXX_COMPILER CMAKE_TOOLCHAIN_FILE CMAKE_OSX_ARCHITECTURES
                CMAKE_OSX_DEPLOYMENT_TARGET CMAKE_MSVC_RUNTIME_LIBRARY)
        if(DEFINED ${var} AND NOT "${${var}}" STREQUAL "")
            list(APPEND forwarded "-D${var}:STRING=${${var}}")
        endif()
    endforeach()
    ExternalProject_Add(localchat_${name}_cpu
        SOURCE_DIR "${CMAKE_SOURCE_DIR}/vendor/llama.cpp"
        BINARY_DIR "${CMAKE_BINARY_DIR}/${name}-cpu"
        # No runtime path at all: the modules link libggml-base (and OpenMP) by soname, which the
        # loader finds already in the process (the wheel's own copy, same source and flags) or in
        # the system's folders, never in a deleted build tree or the current folder.
        CMAKE_CACHE_ARGS ${forwarded} -DCMAKE_BUILD_TYPE:STRING=Release -DBUILD_SHARED_LIBS:BOOL=ON
                   -DCMAKE_SKIP_RPATH:BOOL=ON -DGGML_BACKEND_DL:BOOL=ON -DGGML_CPU_ALL_VARIANTS:BOOL=ON
                   -DGGML_NATIVE:BOOL=OFF -DGGML_LLAMAFILE:BOOL=${llamafile} -DLLAMA_CURL:BOOL=OFF
                   -DLLAMA_BUILD_TESTS:BOOL=OFF -DLLAMA_BUILD_TOOLS:BOOL=OFF
                   -DLLAMA_BUILD_EXAMPLES:BOOL=OFF -DLLAMA_BUILD_SERVER:BOOL=OFF
        BUILD_COMMAND ${CMAKE_COMMAND} --build . --config Release --parallel ${build_targets}
        INSTALL_COMMAND ""
        STEP_TARGETS build)
    # Single-config generators put the modules in bin/, multi-config ones (Visual Studio) in bin/Release/.
    foreach(sub bin bin/Release)
        install(DIRECTORY "${CMAKE_BINARY_DIR}/${name}-cpu/${sub}/"
                DESTINATION "${SKBUILD_PLATLIB_DIR}/llama_cpp/lib${folder}"
                OPTIONAL FILES_MATCHING PATTERN "*ggml-cpu-*")
    endforeach()
endfunction()
