#!/usr/bin/env bash
# compile-probe.sh NAME VERSION STD: before NAME VERSION is compiled from source against the installed torch (an hour
# on a small machine), compile one translation unit of torch's C++ extension headers with the -std=c++STD that
# NAME's build passes. A build that cannot compile stops here in seconds with one line saying why, instead of
# failing at NAME's first file after the wait (torch 2.14's headers: "#error C++20 or later compatible compiler is
# required"). -Wfatal-errors stops at the first error; a header that compiles takes a few tens of seconds.
set -uo pipefail
name=$1 version=$2 std=$3
compiler=${CXX:-g++}
# torch's version, then its headers' and Python's include flags (torch's warnings about a missing GPU go to /dev/null)
read -r torch_version flags < <(python -c 'import sysconfig, torch, torch.utils.cpp_extension as e
print(torch.__version__.split("+")[0], *["-I" + p for p in e.include_paths()], "-I" + sysconfig.get_paths()["include"])' \
    2>/dev/null)
[ -n "$torch_version" ] || { echo "$name $version: torch does not import, so nothing can compile against it" >&2; exit 1; }
probe=$(mktemp --suffix=.cpp)
echo '#include <torch/extension.h>' > "$probe"
# shellcheck disable=SC2086 # the -I flags are separate words
if ! output=$("$compiler" -std="c++$std" -fsyntax-only -Wfatal-errors $flags "$probe" 2>&1); then
    rm -f "$probe"
    needed=$(grep -o -m 1 'C++[0-9]* or later' <<< "$output")
    if [ -n "$needed" ]; then
        echo "$name $version builds with -std=c++$std; torch $torch_version's headers need ${needed% or later}" >&2
    else
        echo "$name $version: torch $torch_version's headers do not compile with $compiler -std=c++$std:" \
             "$(grep -m 1 'error' <<< "$output")" >&2
    fi
    exit 1
fi
rm -f "$probe"
echo "$name $version: torch $torch_version's headers compile with -std=c++$std"
