# plots.gp — the recomputation study's figures, from the benchmark CSV files (make plots).
#   attention_memory.png : peak bytes of forward and backward against N, naive and flash (log-log)
#   attention_time.png   : forward and backward time against N, naive and flash (log-log)
#   train_recompute.png  : training peak memory and step time per --recompute setting
#   train_scale.png      : MFU against model size, flashgrad and PyTorch (make bench-scale's CSV,
#                          bench/results/train_scale.csv, when it is there)
# Inputs: bench/results/attention_cpu.csv (flashgrad bench attention --csv),
#         bench/results/attention_torch_cpu.csv (bench/attention_torch_cpu.py --csv: the SDPA line,
#         when it is there) and bench/results/train_recompute.csv (bench/recompute.sh).
# Every title names the machine and date the figures were measured on: the line of FILE.made beside
# each CSV (bench/made_on.sh writes it), or says that they were not recorded.
set datafile separator ","
set terminal pngcairo size 900,560 noenhanced font ",11"
set key top left
set grid
set logscale xy 2
set xlabel "sequence length N (Nq = Nk)"

# "machine, date" of a CSV's measurements
made(f) = system("cat " . f . ".made 2>/dev/null || echo 'machine and date not recorded'")
att = "bench/results/attention_cpu.csv"
# one implementation's rows (a filtered stream, so its points join into one line)
rows(impl) = "< grep '^" . impl . ",' " . att

set output "bench/results/attention_memory.png"
set title "Attention: peak bytes allocated by the op (allocation counter), float32, d=64\n" . made(att)
set ylabel "peak bytes"
set logscale y 10
plot rows("naive") using 4:15 with linespoints lw 2 pt 7 title "naive forward (stores P)", \
     rows("naive") using 4:16 with linespoints lw 2 pt 5 title "naive backward", \
     rows("flash") using 4:15 with linespoints lw 2 pt 7 title "flash forward (stores O, L)", \
     rows("flash") using 4:16 with linespoints lw 2 pt 5 title "flash backward (recomputes P)"

set output "bench/results/attention_time.png"
set title "Attention: median time, float32, B=1 H=1 d=64, no mask\n" . made(att)
set ylabel "milliseconds"
# PyTorch's F.scaled_dot_product_attention at the same shapes (columns n,...,sdpa_fwd_ms (10), sdpa_bwd_ms (11))
sd = "bench/results/attention_torch_cpu.csv"
sdpa = "< grep '^[0-9]*,0,1,1,' " . sd
if (system("test -f " . sd . " && echo yes") eq "yes") {
plot rows("naive") using 4:11 with linespoints lw 2 pt 7 title "naive forward", \
     rows("naive") using 4:12 with linespoints lw 2 pt 5 title "naive backward (reads stored P)", \
     rows("flash") using 4:11 with linespoints lw 2 pt 7 title "flash forward", \
     rows("flash") using 4:12 with linespoints lw 2 pt 5 title "flash backward (recomputes P)", \
     sdpa using 1:10 with linespoints lw 2 pt 9 dt 2 title "PyTorch SDPA forward (its own run)", \
     sdpa using 1:11 with linespoints lw 2 pt 11 dt 2 title "PyTorch SDPA backward"
} else {
plot rows("naive") using 4:11 with linespoints lw 2 pt 7 title "naive forward", \
     rows("naive") using 4:12 with linespoints lw 2 pt 5 title "naive backward (reads stored P)", \
     rows("flash") using 4:11 with linespoints lw 2 pt 7 title "flash forward", \
     rows("flash") using 4:12 with linespoints lw 2 pt 5 title "flash backward (recomputes P)"
}

tr = "bench/results/train_recompute.csv"
if (system("test -f " . tr . " && echo yes") eq "yes") {
    unset logscale
    set xlabel "--recompute setting"
    set output "bench/results/train_recompute.png"
    set title "GPT training step (Tiny Shakespeare config): peak memory and step time\n" . made(tr)
    set style data histograms
    set style histogram cluster gap 1
    set style fill solid 0.8 border -1
    set boxwidth 0.9
    set ylabel "peak MiB (allocation counter)"
    set y2label "step time, ms"
    set ytics nomirror
    set y2tics
    set yrange [0:*]
    set y2range [0:*]
    # columns: setting,attn,peak_bytes,peak_mib,step_ms,... (row 0 is the header)
    plot tr every ::1 using ($3/1048576):xtic(1) title "peak memory (MiB)" axes x1y1, \
         tr every ::1 using 5 title "step time (ms)" axes x1y2
}

sc = "bench/results/train_scale.csv"
if (system("test -f " . sc . " && echo yes") eq "yes") {
    set style data linespoints
    unset y2label
    unset y2tics
    set ytics mirror
    set logscale x 10
    unset logscale y
    set xlabel "parameters"
    set ylabel "MFU, % of the float32 FMA peak"
    set yrange [0:100]
    set key top left
    set output "bench/results/train_scale.png"
    set title "GPT training step on the CPU: MFU = tokens/s x (6 N + 12 L C T) / FMA peak\n" . made(sc)
    # columns: config,framework,version,n_layer,...,params (10),...,mfu (14)
    fw(name) = "< grep ',".name.",' " . sc
    plot fw("flashgrad") using 10:($14*100) lw 2 pt 7 title "flashgrad", \
         fw("flashgrad") using 10:($14*100):1 with labels offset 0,1 notitle, \
         fw("pytorch") using 10:($14*100) lw 2 pt 5 title "PyTorch"
}
