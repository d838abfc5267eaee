#!/usr/bin/env bash
# Fuzzes every file parser (.npy, checkpoint, tune cache, ILDG/LIME, STL) with libFuzzer for SECONDS each
# (default 60): `scripts/fuzz.sh [SECONDS] [TARGET...]`. A crash, a hang, or one allocation over 64 MiB
# (the inputs are at most 256 KiB, so no parser has a reason to) fails it, and libFuzzer leaves the
# input in fuzz/artifacts/TARGET/. The seed corpus (fuzz/corpus/) starts from valid files; what the
# fuzzer adds stays there (git ignores it).
#
# Needs the pinned nightly (the kernels' toolchain) and cargo-fuzz, which it installs where missing.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(npy checkpoint tunecache ildg stl)
toolchain=nightly-2026-05-20
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
rustup toolchain list | grep -q "^$toolchain" || rustup toolchain install "$toolchain" --profile minimal

# One ASCII STL facet through three vertices.
facet() {
    printf 'facet normal 0 0 0\nouter loop\nvertex %s\nvertex %s\nvertex %s\nendloop\nendfacet\n' "$@"
}

# Valid files to start from, made by the project's own writers (or by hand).
seed() {
    local dir=fuzz/corpus/$1
    mkdir -p "$dir"
    [ -n "$(ls -A "$dir")" ] && return
    case $1 in
        npy)
            cargo run -q --release --bin diffusion -- --engine host --size 5x4x3 --steps 1 \
                --output "$dir/run" >/dev/null
            mv "$dir/run/diffusion.npy" "$dir/seed.npy" && rm -rf "$dir/run" ;;
        checkpoint)
            cargo run -q --release --bin diffusion -- --engine host --size 5x4x3 --steps 2 \
                --checkpoint-every 1 --output "$dir/run" >/dev/null
            mv "$dir/run/checkpoint/diffusion.ckpt" "$dir/seed.ckpt" && rm -rf "$dir/run" ;;
        tunecache)
            printf '# lattice-gpu tunecache v1\ndiffusion3d_f32\t256x256x256\tf32\tNVIDIA H100 80GB HBM3\t0123456789abcdef\tblock_x=128,block_y=1,march=2,variant=0\t0.0512\n' \
                >"$dir/seed.tsv" ;;
        ildg)
            cargo run -q --release --bin lqcd -- plaquette --dims 4 \
                --write-gauge "$dir/seed.lime" >/dev/null ;;
        stl)
            # A tetrahedron, ASCII; the binary form is what the fuzzer makes of its bytes.
            printf 'solid t\n%s\n%s\n%s\n%s\nendsolid t\n' \
                "$(facet '0 0 0' '1 0 0' '0 1 0')" "$(facet '0 0 0' '0 0 1' '1 0 0')" \
                "$(facet '0 0 0' '0 1 0' '0 0 1')" "$(facet '1 0 0' '0 0 1' '0 1 0')" >"$dir/seed.stl" ;;
    esac
}

status=0
for t in "${targets[@]}"; do
    seed "$t"
    echo "fuzzing $t for ${seconds} s"
    if cargo "+$toolchain" fuzz run --fuzz-dir fuzz "$t" "fuzz/corpus/$t" -- \
        -max_total_time="$seconds" -max_len=262144 -malloc_limit_mb=64 -rss_limit_mb=2048 \
        -timeout=10 -print_final_stats=1 >"fuzz/$t.log" 2>&1; then
        echo "$t: $(grep -E '^stat::number_of_executed_units' "fuzz/$t.log" | awk '{print $2}') runs, no crash PASS"
    else
        echo "$t: FAIL (fuzz/$t.log; the input is in fuzz/artifacts/$t/)"
        tail -30 "fuzz/$t.log"
        status=1
    fi
done
exit $status
