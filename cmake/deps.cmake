# Third-party dependencies, all from Debian/Ubuntu packages (scripts/deps.sh installs them).
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(fmt REQUIRED)

# PCRE2 (8-bit, UTF + Unicode properties) runs the BPE pre-tokenizer regexes.
# LAMINA_EXTRA_INCLUDE lets a machine without libpcre2-dev use a carried pcre2.h and the runtime
# library that every Debian/Ubuntu system has (libpcre2-8.so.0).
find_path(PCRE2_INCLUDE_DIR pcre2.h HINTS ${LAMINA_EXTRA_INCLUDE})
find_library(PCRE2_LIBRARY NAMES pcre2-8 libpcre2-8.so.0)
if(NOT PCRE2_INCLUDE_DIR OR NOT PCRE2_LIBRARY)
  message(FATAL_ERROR "PCRE2 not found: run scripts/deps.sh (Debian package libpcre2-dev)")
endif()
add_library(lamina_pcre2 INTERFACE)
target_include_directories(lamina_pcre2 SYSTEM INTERFACE ${PCRE2_INCLUDE_DIR})
target_link_libraries(lamina_pcre2 INTERFACE ${PCRE2_LIBRARY})
target_compile_definitions(lamina_pcre2 INTERFACE PCRE2_CODE_UNIT_WIDTH=8)

if(LAMINA_TESTS)
  find_package(GTest REQUIRED)
endif()
