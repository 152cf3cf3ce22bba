# Sourced by the H200 scripts here: LuaJIT on the paths (.debs/env.sh), the packed CUDA build unpacked into
# /tmp/hb (tests/cuda/h200/pack.sh made .h200/bin.txz), GLM53_LIB pointing at its library, $o the output folder,
# and el, which prints a line with the seconds since setup.
. .debs/env.sh
mkdir -p /tmp/hb && xz -dc ${PACK:-.h200/bin.txz} | tar xf - -C /tmp/hb
export GLM53_LIB=/tmp/hb/libglm53.so
o=${OUT:-/tmp}
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
