# Turns one file into a C header with a byte array: cmake -DIN=... -DOUT=... -DNAME=... -P embed.cmake
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" hexlen)
math(EXPR len "${hexlen} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUT}" "/* Generated from ${IN} by cmake/embed.cmake; do not edit. */\n"
     "#ifndef LEASEGATE_WEB_ASSETS_H\n#define LEASEGATE_WEB_ASSETS_H\n#include <stddef.h>\n"
     "static const unsigned char ${NAME}[] = {${bytes}};\n"
     "static const size_t ${NAME}_LEN = ${len};\n#endif\n")
