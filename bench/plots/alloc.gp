# bench/plots/alloc.gp OUT DATA TITLE: alloc_bench's ns per allocation by
# payload size, one bar per allocator.  DATA: one line per size
# (after comment lines):
#   size glibc mimalloc mi_zalloc boehm heapd heapd_young   (median ns)
load "bench/plots/style.gp"
set output ARG1
d = ARG2
set title ARG3
set ylabel "ns per allocation (median run)"
set xlabel "payload bytes"
set yrange [0:*]
set offsets 0, 0, graph 0.1, 0
set grid noxtics ytics
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border lc rgb "#404040"
set boxwidth 0.9
set xtics scale 0
set key top left
plot d using 2:xtic(1) lc rgb c_malloc title "glibc malloc/free", \
     d using 3 lc rgb c_mimalloc title "mimalloc", \
     d using 4 lc rgb c_mi_zalloc title "mi_zalloc", \
     d using 5 lc rgb c_boehm title "Boehm GC_MALLOC", \
     d using 6 lc rgb c_heapd title "heapd_alloc", \
     d using 7 lc rgb c_heapd_young title "heapd_alloc, young"
