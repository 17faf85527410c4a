#!/usr/bin/env bash
# What the lent GPU machine lacks, carried in the ignored folder .carry (README, "GPU machine"):
#   scripts/gpu-carry.sh prepare    here: pcre2.h, checks cpp-httplib's header, a copy of ../shared, and
#                                   the test models (SmolLM2, Gemma 3 270M; scripts/fetch-model.sh)
#                                   cut into parts of at most 47 MiB; prints what each call carries
#                                   (a call takes 64 MiB in all, the working tree included)
#   scripts/gpu-carry.sh assemble   there: joins a model whose parts have all arrived (kept between
#                                   calls while the machine is warm) into .carry/<name>.gguf, checked
#                                   by sha256; gpu-check.sh then finds it
#   scripts/gpu-carry.sh bin NAME   here: this machine's build/tools/lamina as .carry/bin/NAME.xz
#                                   (~15 MiB), the shared libraries the GPU machine's image lacks in
#                                   .carry/lib and the test vocabulary in .carry/vocab, for
#                                   scripts/gpu-ab.sh --bins (carry .carry/bin .carry/lib .carry/vocab)
#   scripts/gpu-carry.sh prebuilt [--no-audit]
#                                   here: scripts/pdl-audit.py over the build first (a kernel whose
#                                   loads ptxas moved above its PDL wait stops it; ~3 min on 2
#                                   cores), then this machine's build (scripts/build.sh -DLAMINA_CUDA=ON
#                                   -DLAMINA_KBENCH=ON) as .carry/prebuilt/*.xz (~31 MiB: the CLI,
#                                   the GPU tests, the chain ceiling) and .carry/lib, for
#                                   GPU_CHECK_PREBUILT=1 scripts/gpu-check.sh there: no build on the
#                                   GPU machine (~230 s of device time saved a fresh machine). The
#                                   binaries carry this checkout's paths (the CLI, ../shared,
#                                   tests/data): the GPU machine's copy must sit at the same path
set -euo pipefail
cd "$(dirname "$0")/.."
C=.carry
PART=47M
# The shared libraries build/tools/lamina needs that the GPU machine's image lacks (it has CUDA,
# NCCL, fmt 9, OpenSSL and zlib; not cpp-httplib and its brotli), into .carry/lib.
libs() {
  mkdir -p $C/lib
  for lib in $(ldd build/tools/lamina | awk '/cpp-httplib|brotli|pcre2|libfmt/ { print $3 }'); do cp -L "$lib" $C/lib/; done
}
case "${1:-}" in
  prepare)
    mkdir -p $C/include $C/httplib $C/shared $C/parts
    cp /usr/include/pcre2.h $C/include/
    # Debian's httplib.h declares only (its code is in libcpp-httplib.so, absent there): the GPU
    # machine needs upstream's single header, tag v0.11.4, put in $C/httplib by hand (README).
    grep -q "inline void Server::stop" $C/httplib/httplib.h 2>/dev/null ||
      echo "gpu-carry: no single-header httplib.h in $C/httplib (README, GPU machine): serve is not built there" >&2
    rm -rf $C/shared/data && cp -r ../shared/data $C/shared/ && chmod -R u+w $C/shared
    rm -f $C/parts/*
    for name in smollm2 gemma3; do
      arg=; [ $name = gemma3 ] && arg=gemma3
      model=$(scripts/fetch-model.sh $arg) || { echo "gpu-carry: $name unavailable" >&2; continue; }
      split -b $PART -d "$model" $C/parts/$name.
      sha256sum "$model" | cut -c1-64 > $C/parts/$name.sha256
    done
    parts=($(ls $C/parts/smollm2.[0-9][0-9] 2>/dev/null) $(ls $C/parts/gemma3.[0-9][0-9] 2>/dev/null))
    echo "call 1 carries: $C/include $C/httplib $C/shared $(ls $C/parts/*.sha256 | tr '\n' ' ')${parts[0]:-}"
    for f in "${parts[@]:1}"; do echo "next call carries: $f"; done
    echo "each call that has all of a model's parts runs scripts/gpu-carry.sh assemble first"
    ;;
  assemble)
    for sum in $C/parts/*.sha256; do
      [ -f "$sum" ] || continue
      name=$(basename "$sum" .sha256)
      [ -f $C/$name.gguf ] && continue
      cat $C/parts/$name.[0-9][0-9] > $C/$name.gguf.tmp
      if [ "$(sha256sum $C/$name.gguf.tmp | cut -c1-64)" = "$(cat "$sum")" ]; then
        mv $C/$name.gguf.tmp $C/$name.gguf && echo "gpu-carry: $C/$name.gguf"
      else
        rm $C/$name.gguf.tmp && echo "gpu-carry: $name: parts missing or damaged (sha256 differs)"
      fi
    done
    ;;
  bin)
    name=${2:?usage: scripts/gpu-carry.sh bin NAME}
    [ -x build/tools/lamina ] || { echo "gpu-carry: build/tools/lamina not built (scripts/build.sh)" >&2; exit 1; }
    mkdir -p $C/bin $C/vocab
    xz -9e -T0 -c build/tools/lamina > $C/bin/$name.xz
    libs
    cp ../shared/data/vocab/ggml-vocab-llama-spm.gguf $C/vocab/
    ls -la $C/bin/$name.xz $C/lib
    ;;
  prebuilt)
    bins=(tools/lamina tests/lamina_gpu_tests tools/lamina_chain_ceiling)
    for b in "${bins[@]}"; do
      [ -x build/$b ] || { echo "gpu-carry: build/$b not built (scripts/build.sh -DLAMINA_CUDA=ON -DLAMINA_KBENCH=ON)" >&2; exit 1; }
    done
    if [ "${2:-}" != --no-audit ]; then
      scripts/pdl-audit.py --install --jobs "$(nproc)" > build/pdl-audit.log ||
        { cat build/pdl-audit.log >&2; echo "gpu-carry: scripts/pdl-audit.py lists kernels (above; --no-audit to carry anyway)" >&2; exit 1; }
      echo "gpu-carry: pdl-audit: $(grep -c 'kernels that wait' build/pdl-audit.log) sources, no load moved above a PDL wait"
    fi
    rm -rf $C/prebuilt && mkdir -p $C/prebuilt
    for b in "${bins[@]}"; do xz -9 -T0 -c build/$b > $C/prebuilt/$(basename $b).xz; done
    echo "$PWD" > $C/prebuilt/built-in  # where the binaries look for the CLI, ../shared and tests/data
    libs
    du -sh $C/prebuilt $C/lib
    ;;
  *) echo "usage: scripts/gpu-carry.sh prepare|assemble|bin NAME|prebuilt [--no-audit]" >&2; exit 1 ;;
esac
