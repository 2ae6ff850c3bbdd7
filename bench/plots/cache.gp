# bench/plots/cache.gp OUT DATA TITLE: cache_bench's lookups per second by
# worker processes, one bar per implementation, log y (Redis without
# pipelining is two orders of magnitude below the rest).  DATA: one line per
# worker count, 1, 2 and 4 (after comment lines):
#   workers heapd redis redis_pipe lmdb mutex   (lookups/s, median run)
load "bench/plots/style.gp"
set output ARG1
d = ARG2
set title ARG3
set logscale y
set format y "%.0s%c"
set ylabel "lookups per second (all workers)"
set xlabel "worker processes"
set grid noxtics ytics
set xtics scale 0 ("1" 0, "2" 1, "4" 2)
set key inside top center horizontal maxrows 2
# bars by hand (boxxyerror), from the bottom of the axis up
n = 5.0
w = 0.8 / n
x(row, k) = row + (k - (n - 1) / 2) * w
ybot = 1e3
set yrange [ybot:*]
set xrange [-0.6:2.6]
set offsets 0, 0, graph 0.1, 0
array colour[5] = [c_heapd, c_redis, c_redis_pipe, c_lmdb, c_mutex]
array name[5] = ["heapd map", "Redis", "Redis, pipelined", "LMDB", "mutex table"]
lbl(v) = v >= 1e6 ? sprintf("%.1fM", v / 1e6) : sprintf("%.0fk", v / 1e3)
plot for [k = 0:4] d using (x($0, k)):(column(k + 2)):(x($0, k) - w / 2):(x($0, k) + w / 2):(ybot):(column(k + 2)) \
         with boxxyerror fs solid 0.85 border lc rgb "#404040" \
         lc rgb colour[k + 1] title name[k + 1], \
     for [k = 0:4] d using (x($0, k)):(column(k + 2)):(lbl(column(k + 2))) \
         with labels offset 0, 0.6 font ",9" notitle
