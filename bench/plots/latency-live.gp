# bench/plots/latency-live.gp OUT DATA TITLE: latency_bench's longest
# iteration against the live set, log-log.  DATA: one line per live set,
#   live heapd_max_ns heapd_pause_max_ns boehm_max_ns boehm_pause_max_ns
#   floor_busy_max_ns floor_max_ns "label"
# (the runs scripts/bench reports: the median maximum of each).
load "bench/plots/style.gp"
set output ARG1
d = ARG2
set title ARG3
set logscale xy
eval "set ytics " . ns_tics
set mytics 10
set xlabel "live set (nodes in the ring)"
set ylabel "longest iteration"
set offsets graph 0.06, graph 0.06, 0, 0
# room for the key above the lines: a decade and a half over the highest
stats d using 4 nooutput
set yrange [*:STATS_max * 30]
set key top left horizontal maxrows 3
plot d using 1:4:xtic(8) with linespoints lw 2 pt 7 ps 0.8 lc rgb c_boehm \
         title "Boehm GC", \
     d using 1:($4 / 20) with lines lw 1 dt 3 lc rgb c_boehm \
         title "Boehm GC / 20 (target)", \
     d using 1:2 with linespoints lw 2 pt 7 ps 0.8 lc rgb c_heapd \
         title "heapd", \
     d using 1:3 with linespoints lw 1.5 dt 2 pt 6 ps 0.8 lc rgb c_heapd \
         title "heapd, reported pause", \
     d using 1:6 with linespoints lw 1.5 dt 2 pt 1 ps 0.8 lc rgb c_malloc_busy \
         title "floor: malloc/free, other CPU busy"
