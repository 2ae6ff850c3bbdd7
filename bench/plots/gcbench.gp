# bench/plots/gcbench.gp OUT DATA TITLE: GCBench's total time per
# implementation, bars.  DATA: one line each,
#   "label" total_ms min_ms max_ms pause_ms colour
# (the median run's total, every run's least and most, the median run's
# collector-reported pauses, young collections included; colour 0xRRGGBB).
load "bench/plots/style.gp"
set output ARG1
d = ARG2
set title ARG3
set ylabel "total time (ms)"
set yrange [0:*]
stats d using 2 nooutput
set xrange [-0.6:STATS_records - 0.4]
set offsets 0, 0, graph 0.12, 0
set boxwidth 0.6
set grid noxtics ytics
set xtics scale 0
set key top left
plot d using 0:2:6:xtic(1) with boxes fs solid 0.85 border lc rgb "#404040" \
         lc rgb variable title "total time (median run)", \
     d using 0:5 with boxes fs pattern 4 transparent border lc rgb "#202020" \
         lc rgb "#202020" title "of which collector pauses", \
     d using 0:3:(0):($4 - $3) with vectors heads size 0.1, 90 fixed \
         lc rgb "#000000" notitle, \
     keyentry with yerrorbars ps 0 lc rgb "#000000" title "every run (least to most)", \
     d using 0:4:(sprintf("%.0f ms", $2)) with labels offset 0, 0.8 notitle
