/* Boehm GC's pauses, for the benchmarks that compare with it.  Boehm 8.2
 * has no stopped-time counter; a collection event callback timestamps
 * GC_EVENT_START..GC_EVENT_END.  The collection runs on the mutator thread
 * with the world stopped, so that interval is its pause; lazy sweeping
 * done later inside GC_MALLOC is not counted.  Include once per program
 * (it defines the counters) after <gc.h> and bench_util.h. */
#ifndef HEAPD_BENCH_BOEHM_PAUSES_H
#define HEAPD_BENCH_BOEHM_PAUSES_H

static uint64_t b_gc_start, b_pause_max, b_pause_total, b_events;

static void GC_CALLBACK b_on_event(GC_EventType e)
{
    /* Called with the GC lock held: only take timestamps. */
    if (e == GC_EVENT_START) {
        b_gc_start = now_ns();
    } else if (e == GC_EVENT_END && b_gc_start) {
        uint64_t d = now_ns() - b_gc_start;
        b_gc_start = 0;
        b_pause_total += d;
        if (d > b_pause_max)
            b_pause_max = d;
        b_events++;
    }
}

#endif
