# bench/plots/style.gp: what every figure scripts/bench draws shares, loaded
# by the other bench/plots/*.gp (gnuplot runs them from the top of the tree).
# SVG of a fixed size on a white background (readable on a dark page too),
# no enhanced text (names with '_' stay as they are); gnuplot's SVG carries
# no date, so the same data make the same file.
set encoding utf8
set terminal svg size 760,430 fixed font "sans-serif,12" noenhanced \
    background rgb "white" linewidth 1.2
set border 3 lc rgb "#404040"
set tics nomirror
set grid back lc rgb "#e0e0e0" lw 0.8
set key top right noautotitle box lc rgb "#c0c0c0" opaque samplen 2.5

# one colour per implementation, the same in every figure
c_heapd = "#1f77b4"
c_heapd_young = "#17becf"
c_boehm = "#d62728"
c_malloc = "#555555"
c_malloc_busy = "#aaaaaa"
c_mimalloc = "#2ca02c"
c_mi_zalloc = "#98df8a"
c_redis = "#ff7f0e"
c_redis_pipe = "#ffbb78"
c_lmdb = "#8c564b"
c_mutex = "#9467bd"

# durations in ns on a log axis, labelled in their unit
ns_tics = '("10 ns" 1e1, "100 ns" 1e2, "1 µs" 1e3, "10 µs" 1e4, "100 µs" 1e5, "1 ms" 1e6, "10 ms" 1e7, "100 ms" 1e8, "1 s" 1e9, "10 s" 1e10)'
