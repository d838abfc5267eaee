#!/usr/bin/env bash
# Strong scaling over the GPUs of one host, one MPI rank per GPU: diffusion 512^3 f32 (z split; halos
# through host memory, and through NCCL straight between the GPUs), the D3Q19 lattice Boltzmann
# lid-driven cavity at 384^3 f32 (z split; in place with host halos, two-lattice with NCCL halos) and
# the advection swirl at 8192^2
# (y split), and the lattice-QCD BiCGStab and its operator M_hat in f32 at 32^3x64 and 48^3x96 (t split,
# ghosts and sums through NCCL, each solver variant, with and without overlap; one GPU: the unsplit
# solve: `lqcd solve --bench`), each with 1, 2, ... N ranks, from
# the `mpi` builds that `scripts/gpu-check.sh stage` packs (carry .gpu-bin). Every rank sees every GPU
# and the applications take GPU (local rank) themselves, as a user's `mpirun` gets it; NCCL logs at INFO,
# so the summary can say which transport (P2P over NVLink, or SHM through host memory) it chose.
#
#   scripts/scaling-check.sh [N [PARTS]]   N: the most ranks (default: every GPU nvidia-smi lists);
#                                          PARTS: any of diffusion, lbm, advection, lqcd, or stencils
#                                          (the first three), and temporal (not in the default set:
#                                          diffusion 512^3 auto-tuned, in passes of 3 steps in f32 and
#                                          2 in f64 with halos as deep, against single steps; NCCL
#                                          halos); default all. Where a call's time is limited, split
#                                          the parts over calls.
#
# Where the N GPUs' time goes: each rank's part of diffusion, LBM and advection on one GPU, whole and
# cut as a rank of N steps it (--cut), against N GPUs' rate per GPU.
#
# Weak scaling: diffusion, LBM and advection with the one-GPU size per GPU (NCCL halos). Runs write
# under /tmp/scaling; with $OUT set, its logs, the table and the picture are packed after every run into
# $OUT/scaling.tar.gz (one file, so that a call cut short still returns them). GPU 0's device-to-device
# copy bandwidth (from `diffusion bench`), a table of rates and parallel efficiency (efficiency = rate
# on n GPUs / (n x rate on one), also as scaling.csv, drawn as scaling.png by scaling-plot) and the halo
# exchange bandwidth each NCCL run reported are printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.gpu-bin
if [ ! -x "$BIN/mpi/diffusion" ] && [ -f "$BIN/bundle.tar.xz" ]; then
    xz -dc "$BIN/bundle.tar.xz" | tar xf - -C "$BIN"
fi
if [ ! -x "$BIN/mpi/diffusion" ] || [ ! -x "$BIN/mpi/lbm" ]; then
    echo "scaling-check: no $BIN/mpi builds; run scripts/gpu-check.sh stage on a build machine first" >&2
    exit 1
fi
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
N=${1:-$gpus}
parts=" ${2:-stencils lqcd} "
parts=${parts/ stencils / diffusion lbm advection }
# want PART: whether PARTS names it.
want() { [[ $parts == *" $1 "* ]]; }
if [ "$gpus" -lt 1 ] || [ "$N" -gt "$gpus" ]; then
    echo "scaling-check: $N ranks asked for, $gpus GPUs present" >&2
    exit 1
fi
out=/tmp/scaling
rm -rf "$out" && mkdir -p "$out"
# publish: the logs, table and picture so far into $OUT/scaling.tar.gz, if $OUT is set.
publish() {
    [ -n "${OUT:-}" ] || return 0
    (cd "$out" && tar czf "$OUT/scaling.tar.gz" -- *.log *.txt *.csv *.png 2>/dev/null)
    return 0
}
echo "run,gpus,rate,unit,efficiency_percent" >"$out/scaling.csv"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee "$out/gpus.txt"
CUDA_VISIBLE_DEVICES=0 timeout 120 "$BIN/diffusion" bench --sizes 32 --precision f32 >"$out/copy.log" 2>&1
copy=$(grep -o 'copy bandwidth [0-9.]* GB/s' "$out/copy.log" | head -1)

# Each run's duration goes to the terminal as it ends (fd 3), its output to its log: a call cut short
# by the device's time limit still shows how far it got and what each run cost.
exec 3>&1
# on_gpus NP COMMAND...: the command on NP ranks; rank r picks GPU r.
on_gpus() {
    local np=$1 t0=$SECONDS rc
    shift
    NCCL_DEBUG=${NCCL_DEBUG:-INFO} timeout 240 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$@"
    rc=$?
    publish
    echo "$(date +%T) $np rank(s), $((SECONDS - t0)) s, exit $rc: $(basename "$1") ${*:2:6}" >&3
    return $rc
}

# The advection runs: the launch shape the bench tunes at 8192^2 (packed kernel), and steps enough
# (0.8 s on one H100) that the progress bar's synchronisations, every 1% of the run, cost little.
dif=(diffusion --engine device --block 32x4 --march 4 --variant vector --mpi --steps 1000)
lbm=(lbm cavity --engine device --mpi --steps 300)
adv=(advection swirl --engine device --block 32x4 --unroll 4 --mpi --steps 2000)
declare -A rate size_of
# timed NAME NP UNIT APP ARGS...: $BIN/mpi/APP on NP ranks, logged to NAME-NP.log, its output under
# $out removed after; the last rate in UNIT it prints goes to rate[NAME,NP].
timed() {
    local name=$1 np=$2 unit=$3
    shift 3
    on_gpus "$np" "$BIN/mpi/$1" "${@:2}" --output "$out/$name-$np" >"$out/$name-$np.log" 2>&1
    rate[$name,$np]=$(grep -o "[0-9.]* $unit" "$out/$name-$np.log" | tail -1 | cut -d' ' -f1)
    rm -rf "${out:?}/$name-$np"
}
# cut_part APP SIZE UNIT ARGS...: APP at SIZE on one GPU, whole and then --cut with NCCL halos; the
# rates go to rate[APP-part,1] and rate[APP-cut,1], printed after the scaling table.
cut_part() {
    local app=$1 size=$2 unit=$3
    shift 3
    timed "$app-part" 1 "$unit" "$@" --size "$size"
    timed "$app-cut" 1 "$unit" "$@" --halos nccl --cut --size "$size"
    size_of[$app]=$size
}
for np in $(seq 1 "$N"); do
    if want diffusion; then
        timed diffusion "$np" GLUPS "${dif[@]}" --size 512
        timed diffusion-nccl "$np" GLUPS "${dif[@]}" --halos nccl --size 512
        timed diffusion-seq "$np" GLUPS "${dif[@]}" --halos nccl --no-overlap --size 512
    fi
    if want lbm; then
        timed lbm "$np" MLUPs/s "${lbm[@]}" --size 384
        # NCCL halos need two-lattice streaming.
        timed lbm-nccl "$np" MLUPs/s "${lbm[@]}" --streaming ab --halos nccl --size 384
        timed lbm-seq "$np" MLUPs/s "${lbm[@]}" --streaming ab --halos nccl --no-overlap --size 384
    fi
    if want advection; then
        timed advection "$np" "G points/s" "${adv[@]}" --size 8192x8192
        timed advection-nccl "$np" "G points/s" "${adv[@]}" --halos nccl --size 8192x8192
        timed advection-seq "$np" "G points/s" "${adv[@]}" --halos nccl --no-overlap --size 8192x8192
    fi
    # Weak scaling: the same size per GPU (NCCL halos, overlapped); one GPU is the strong run's.
    if [ "$np" -eq 1 ]; then
        for app in diffusion lbm advection; do rate[$app-weak,1]=${rate[$app-nccl,1]:-}; done
        # Where N GPUs' time goes, measured on one: each rank's part (1/N of the strong size) whole,
        # then cut as a rank of N steps it (--cut: boundary layers and their exchange, with NCCL
        # halos from nothing, beside the interior).
        if [ "$N" -gt 1 ]; then
            want diffusion && cut_part diffusion "512x512x$((512 / N))" GLUPS "${dif[@]}"
            want lbm && cut_part lbm "384x384x$((384 / N))" MLUPs/s "${lbm[@]}" --streaming ab
            want advection && cut_part advection "8192x$((8192 / N))" "G points/s" "${adv[@]}"
        fi
    else
        want diffusion && timed diffusion-weak "$np" GLUPS "${dif[@]}" --halos nccl \
            --size "512x512x$((512 * np))"
        want lbm && timed lbm-weak "$np" MLUPs/s "${lbm[@]}" --streaming ab --halos nccl \
            --size "384x384x$((384 * np))"
        want advection && timed advection-weak "$np" "G points/s" "${adv[@]}" --halos nccl \
            --size "8192x$((8192 * np))"
    fi
done

# Temporally blocked passes split over the GPUs (with overlap, and without: then each rank's slab is one
# pass after the exchange): the auto-tuned engine, its launches tuned and cached by an untimed run of
# each first (the split's loops are tuned apart from one domain's; tuning takes some 1800 steps).
tdif=(diffusion --engine device --mpi --halos nccl --size 512)
for np in $(seq 1 "$N"); do
    want temporal || break
    for case in "f32 3" "f32 3 seq" "f32 1" "f32 auto" "f64 2" "f64 2 seq" "f64 1" "f64 auto"; do
        set -- $case
        name=temporal-$1-t$2${3:+-$3}
        if [ "$np" -eq 1 ] && [ -n "${3:-}" ]; then
            # One rank is not split: with overlap or without, the same run.
            rate[$name,1]=${rate[temporal-$1-t$2,1]:-}
            continue
        fi
        extra=()
        [ -n "${3:-}" ] && extra=(--no-overlap)
        on_gpus "$np" "$BIN/mpi/diffusion" "${tdif[@]:1}" "${extra[@]}" --precision "$1" --temporal "$2" \
            --steps 3000 --output "$out/warm" >"$out/warm-$np.log" 2>&1
        rm -rf "${out:?}/warm"
        timed "$name" "$np" GLUPS "${tdif[@]}" "${extra[@]}" --precision "$1" --temporal "$2" --steps 3000
    done
done

lqcd_variants="sync async graph waitkernel streamwait"
lqcd_sizes="32x32x32x64 48x48x48x96"
# gflops LOG WHAT: the GFLOPS on LOG's line that starts with WHAT.
gflops() { grep "^$2" "$1" | grep -o '[0-9.]* GFLOPS' | head -1 | cut -d' ' -f1; }
for np in $(seq 1 "$N"); do
    want lqcd || break
    for dims in $lqcd_sizes; do
        # Up to 200 iterations of each variant (after an untimed run), and M_hat alone; one GPU:
        # unsplit. On a hot field the f32 recurrence residual underflows to zero, which ends the run:
        # after 37 iterations at kappa 0.12, 90 at 0.18 (H100, 32^3x64).
        args=(solve --engine device --precision f32 --dims "$dims" --kappa 0.18 --bench 200 --check-every 20)
        for mode in overlap seq; do
            log="$out/lqcd-$dims-$mode-$np.log"
            if [ "$np" -eq 1 ]; then
                [ "$mode" = overlap ] && on_gpus 1 "$BIN/mpi/lqcd" "${args[@]}" >"$log" 2>&1
                log="$out/lqcd-$dims-overlap-1.log"
            elif [ "$mode" = overlap ]; then
                on_gpus "$np" "$BIN/mpi/lqcd" "${args[@]}" --mpi --halos nccl >"$log" 2>&1
            else
                on_gpus "$np" "$BIN/mpi/lqcd" "${args[@]}" --mpi --halos nccl --no-overlap >"$log" 2>&1
            fi
            tag=$([ "$mode" = seq ] && echo -seq)
            for v in $lqcd_variants; do
                rate[lqcd-$dims-$v$tag,$np]=$(gflops "$log" "bench $v:")
            done
            rate[mhat-$dims$tag,$np]=$(gflops "$log" "operator M_hat")
        done
    done
done

echo
echo "strong scaling, one rank per GPU ($(head -1 "$out/gpus.txt" | cut -d, -f2 | xargs); GPU 0 ${copy:-copy bandwidth not measured}):"
printf '%-38s %5s %16s %11s\n' "run" "GPUs" "rate" "efficiency"
apps=""
for app in diffusion lbm advection; do
    want $app && apps="$apps $app $app-nccl $app-seq $app-weak"
done
want temporal && apps="$apps temporal-f32-t3 temporal-f32-t3-seq temporal-f32-t1 temporal-f32-tauto"
want temporal && apps="$apps temporal-f64-t2 temporal-f64-t2-seq temporal-f64-t1 temporal-f64-tauto"
if want lqcd; then
    for dims in $lqcd_sizes; do
        apps="$apps mhat-$dims mhat-$dims-seq"
        for v in $lqcd_variants; do apps="$apps lqcd-$dims-$v lqcd-$dims-$v-seq"; done
    done
fi
for app in $apps; do
    case $app in
        diffusion) unit=GLUPS what="diffusion 512^3 f32" ;;
        diffusion-nccl) unit=GLUPS what="diffusion, NCCL halos" ;;
        diffusion-seq) unit=GLUPS what="diffusion, NCCL, no overlap" ;;
        lbm) unit=MLUPs/s what="lbm cavity 384^3 f32" ;;
        lbm-nccl) unit=MLUPs/s what="lbm, ab, NCCL halos" ;;
        lbm-seq) unit=MLUPs/s what="lbm, ab, NCCL, no overlap" ;;
        advection) unit="Gpoints/s" what="advection swirl 8192^2" ;;
        advection-nccl) unit="Gpoints/s" what="advection, NCCL halos" ;;
        advection-seq) unit="Gpoints/s" what="advection, NCCL, no overlap" ;;
        diffusion-weak) unit=GLUPS what="diffusion weak, 512^3 per GPU" ;;
        lbm-weak) unit=MLUPs/s what="lbm weak, 384^3 per GPU" ;;
        advection-weak) unit="Gpoints/s" what="advection weak, 8192^2 per GPU" ;;
        temporal-*-t1) unit=GLUPS what="diffusion 512^3 ${app:9:3}, single steps" ;;
        temporal-*-tauto) unit=GLUPS what="diffusion 512^3 ${app:9:3}, --temporal auto (chosen on the slab)" ;;
        temporal-*-seq) unit=GLUPS what="diffusion 512^3 ${app:9:3}, ${app:14:1} steps/pass, no overlap" ;;
        temporal-*) unit=GLUPS what="diffusion 512^3 ${app:9:3}, ${app:14:1} steps/pass" ;;
        mhat-*-seq) unit=GFLOPS what="M_hat ${app:5:-4} f32, no overlap" ;;
        mhat-*) unit=GFLOPS what="M_hat ${app#mhat-} f32" ;;
        lqcd-*-seq) unit=GFLOPS what="bicgstab ${app:5:-4} f32, no overlap" what=${what/-/ } ;;
        lqcd-*) unit=GFLOPS what="bicgstab ${app#lqcd-} f32" what=${what/-/ } ;;
    esac
    one=${rate[$app,1]:-}
    for np in $(seq 1 "$N"); do
        r=${rate[$app,$np]:-}
        if [ -z "$r" ] || [ -z "$one" ]; then
            printf '%-38s %5s %16s %11s\n' "$what" "$np" "FAILED" "-"
            continue
        fi
        eff=$(awk -v r="$r" -v o="$one" -v n="$np" 'BEGIN { printf "%.1f%%", 100 * r / (n * o) }')
        printf '%-38s %5s %16s %11s\n' "$what" "$np" "$r $unit" "$eff"
        echo "$app,$np,$r,$unit,${eff%\%}" >>"$out/scaling.csv"
    done
done
echo
echo "halo exchange between the GPUs through NCCL (rank 0, on the exchange stream, peers' waits included;"
echo "seq: no overlap, the exchange alone):"
for log in "$out"/{diffusion,lbm,advection}-{nccl,seq,weak}-*.log; do
    [ -f "$log" ] && [ "${log##*-}" != 1.log ] || continue
    line=$(grep -o '[0-9.]* MB sent in each, [0-9.]* ms each on the exchange stream: [0-9.]* GB/s' "$log" | head -1)
    printf '%-28s %s\n' "$(basename "$log" .log)" "${line:-no exchange line}"
done
echo "NCCL's transports between the ranks (from its INFO log):"
for log in "$out"/*-nccl-*.log "$out"/lqcd-*-overlap-*.log; do
    [ -f "$log" ] && [ "${log##*-}" != 1.log ] || continue
    via=$(grep -o ' via [A-Za-z0-9/_]*' "$log" | sort -u | paste -sd, | sed 's/^ //')
    printf '%-28s %s\n' "$(basename "$log" .log)" "${via:-none logged}"
done
if [ -n "${size_of[*]:-}" ]; then
    echo "each rank's part on one GPU, whole and cut as a rank of $N steps it (NCCL halos from nothing,"
    echo "overlapped); the cut's rate against the whole part's, and $N GPUs' rate per GPU against the cut's:"
    for app in diffusion lbm advection; do
        want $app || continue
        whole=${rate[$app-part,1]:-} cut=${rate[$app-cut,1]:-} all=${rate[$app-nccl,$N]:-}
        if [ -z "$whole" ] || [ -z "$cut" ]; then
            printf '%-10s %-16s %s\n' "$app" "${size_of[$app]}" FAILED
            continue
        fi
        printf '%-10s %-16s whole %-10s cut %-10s (%s)   %s GPUs per GPU: %s\n' "$app" "${size_of[$app]}" \
            "$whole" "$cut" "$(awk -v c="$cut" -v w="$whole" 'BEGIN { printf "%.1f%%", 100 * c / w }')" \
            "$N" "$([ -n "$all" ] && awk -v a="$all" -v c="$cut" -v n="$N" \
                'BEGIN { printf "%.4g (%.1f%% of the cut)", a / n, 100 * a / (n * c) }' || echo FAILED)"
    done
fi
echo "(table as CSV: $out/scaling.csv)"
# The picture is a convenience: without the binary or with a bad table the numbers above still stand.
if [ ! -x "$BIN/scaling-plot" ]; then
    echo "(no picture: $BIN/scaling-plot is missing; run scripts/gpu-check.sh stage again)"
elif "$BIN/scaling-plot" "$out/scaling.csv" --output "$out/scaling.png" >/dev/null; then
    echo "(table as PNG: $out/scaling.png)"
else
    echo "(no picture: scaling-plot failed with the error above)"
fi
publish
