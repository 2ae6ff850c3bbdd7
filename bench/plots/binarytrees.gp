# bench/plots/binarytrees.gp OUT DATA TITLE YOUNG: binary-trees' total time
# for each depth and number of processes, one bar per implementation.
# DATA: one line each (after comment lines):
#   "label" malloc boehm heapd heapd_young   (ms, median run)
# (label: "DEPTH, PROCESSES")
# YOUNG: the young-on bars' title.
load "bench/plots/style.gp"
set output ARG1
d = ARG2
set title ARG3
set ylabel "total time (ms)"
set xlabel "depth, processes"
set yrange [0:*]
stats d using 2 nooutput
set xrange [-0.6:STATS_records - 0.4]
set offsets 0, 0, graph 0.3, 0
set grid noxtics ytics
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border lc rgb "#404040"
set boxwidth 0.9
set xtics scale 0
set key top left
plot d using 2:xtic(1) lc rgb c_malloc title "glibc malloc/free", \
     d using 3 lc rgb c_boehm title "Boehm GC", \
     d using 4 lc rgb c_heapd title "heapd, young off", \
     d using 5 lc rgb c_heapd_young title ARG4
