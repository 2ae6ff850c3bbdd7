# bench/plots/latency.gp OUT DATA TITLE: latency_bench's iteration times as
# a complementary CDF (the fraction of iterations that took at least x),
# log-log, one line per implementation.  DATA-IMPL.ccdf (IMPL heapd, boehm,
# malloc, malloc_busy): "x_ns fraction" points of the step curve scripts/bench
# makes from latency_bench --dump-hist of the run it reports.
load "bench/plots/style.gp"
set output ARG1
d = ARG2
set title ARG3
set logscale xy
eval "set xtics " . ns_tics
set mxtics 10
set ytics ("1" 1, "10⁻¹" 1e-1, "10⁻²" 1e-2, "10⁻³" 1e-3, "10⁻⁴" 1e-4, \
           "10⁻⁵" 1e-5, "10⁻⁶" 1e-6, "10⁻⁷" 1e-7, "10⁻⁸" 1e-8, "10⁻⁹" 1e-9)
set mytics 10
set xlabel "iteration time x"
set ylabel "fraction of iterations taking x or longer"
set xrange [10:*]
set yrange [*:1.5]
set key top right
plot d."-boehm.ccdf" using 1:2 with lines lw 2 lc rgb c_boehm title "Boehm GC", \
     d."-heapd.ccdf" using 1:2 with lines lw 2 lc rgb c_heapd title "heapd", \
     d."-malloc.ccdf" using 1:2 with lines lw 1.5 lc rgb c_malloc \
         title "malloc/free (no collector)", \
     d."-malloc_busy.ccdf" using 1:2 with lines lw 1.5 dt 2 lc rgb c_malloc_busy \
         title "malloc/free, other CPU busy"
