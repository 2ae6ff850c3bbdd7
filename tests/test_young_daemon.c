/* The daemon's side of nurseries (Note [Nurseries] in proto/young.h),
 * over the raw protocol, so that it needs nothing of libheapd's young
 * side: an attach with young = true gets a run of YOUNG segments that the
 * segments report shows and that detach and a closed connection give
 * back (Note [A nursery in the segment table] in daemon/gc/segment.c);
 * requests out of range are refused; references into a nursery planted
 * anywhere but its own mutator's roots are counted in young_refs_refused
 * and never followed (Note [References into a nursery] in
 * daemon/gc/validate.c); garbage in a nursery its roots point into is traced
 * without harm (Note [Tracing a slot's nursery] in daemon/gc/mark.c). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check_main.h"
#include "fdpass.h"
#include "frame.h"
#include "harness.h"
#include "heapd.h"
#include "layout.h"
#include "wire.h"
#include "young.h"

static struct daemon_proc D;

#define SEG (128u << 10) /* harness_default_config's segment_size */

/* A raw mutator client that keeps its Welcome's descriptors. */
struct raw {
    int sock;
    int heap_fd, mem_fd;
    uint64_t base;
};

/* Read the Welcome of a Hello just sent, keeping the heap's memfd and the
 * client's control memory (Note [Client control memory]). */
static void raw_connect(struct raw *r)
{
    int got[FDPASS_MAX];
    unsigned ngot = 0;
    uint8_t hdr[4];
    r->sock = harness_raw_connect(D.sock);
    harness_send_hello(r->sock, "default", PROTOCOL_VERSION,
                       HEAPD__CLIENT_KIND__CLIENT_MUTATOR);
    /* the descriptors come with the frame's first bytes */
    ssize_t n = fdpass_recv(r->sock, hdr, sizeof hdr, got, &ngot);
    ck_assert_msg(n == (ssize_t)sizeof hdr && ngot == 3,
                  "a Welcome with 3 descriptors: got %zd bytes, %u fds", n,
                  ngot);
    r->heap_fd = got[0];
    close(got[1]);
    r->mem_fd = got[2];
    uint32_t len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 |
                   (uint32_t)hdr[2] << 8 | hdr[3];
    ck_assert_msg(len > 0 && len <= FRAME_MAX_PAYLOAD, "bad length %u", len);
    uint8_t *buf = malloc(len);
    ck_assert_ptr_nonnull(buf);
    for (size_t at = 0; at < len;) {
        ssize_t k = read(r->sock, buf + at, len - at);
        ck_assert_msg(k > 0, "EOF inside the Welcome");
        at += (size_t)k;
    }
    Heapd__Envelope *w = frame_decode(buf, len);
    free(buf);
    ck_assert_msg(w && w->body_case == HEAPD__ENVELOPE__BODY_WELCOME,
                  "heapd did not welcome a raw mutator");
    r->base = w->welcome->heap_base;
    heapd__envelope__free_unpacked(w, NULL);
}

static void raw_close(struct raw *r)
{
    close(r->sock);
    close(r->heap_fd);
    close(r->mem_fd);
}

/* Send AttachRequest{young, BYTES, AGE} as SEQ; the reply (caller frees). */
static Heapd__Envelope *raw_attach(struct raw *r, uint64_t seq, bool young,
                                   uint64_t bytes, uint32_t age)
{
    Heapd__AttachRequest ar = HEAPD__ATTACH_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    ar.young = young;
    ar.young_bytes = bytes;
    ar.young_age = age;
    env.seq = seq;
    env.body_case = HEAPD__ENVELOPE__BODY_ATTACH_REQUEST;
    env.attach_request = &ar;
    harness_send_env(r->sock, &env);
    Heapd__Envelope *e = harness_read_env(r->sock, NULL);
    ck_assert_msg(e != NULL, "heapd closed the connection at an attach");
    ck_assert_uint_eq(e->seq, seq);
    return e;
}

static void raw_detach(struct raw *r, uint32_t slot)
{
    Heapd__DetachRequest dr = HEAPD__DETACH_REQUEST__INIT;
    Heapd__Envelope env = HEAPD__ENVELOPE__INIT;
    dr.slot = slot;
    env.seq = 77;
    env.body_case = HEAPD__ENVELOPE__BODY_DETACH_REQUEST;
    env.detach_request = &dr;
    harness_send_env(r->sock, &env);
    Heapd__Envelope *e = harness_read_env(r->sock, NULL);
    ck_assert_msg(e && e->body_case == HEAPD__ENVELOPE__BODY_DETACH_REPLY,
                  "detach of slot %u was not answered", slot);
    heapd__envelope__free_unpacked(e, NULL);
}

/* The segments the report counts in nurseries. */
static uint32_t young_segments(heapd_client *ctl)
{
    heapd_heap_segments hs[2];
    size_t n = 0;
    ck_assert_int_eq(heapd_segments(ctl, "default", hs, 2, &n), 0);
    ck_assert_uint_eq(n, 1);
    return hs[0].young;
}

struct young_seen {
    heapd_client *ctl;
    uint32_t want;
};

static bool young_is(void *arg, char *seen, size_t len)
{
    struct young_seen *y = arg;
    uint32_t now = young_segments(y->ctl);
    snprintf(seen, len, "%u segments in nurseries", now);
    return now == y->want;
}

/* Wait (bounded) until the report counts WANT segments in nurseries. */
static void wait_young(heapd_client *ctl, uint32_t want, const char *what)
{
    struct young_seen y = {ctl, want};
    harness_wait_until(young_is, &y, what);
}

static void expect_error(Heapd__Envelope *e, Heapd__ErrorCode code,
                         const char *substr)
{
    ck_assert_int_eq(e->body_case, HEAPD__ENVELOPE__BODY_ERROR);
    ck_assert_int_eq(e->error->code, code);
    ck_assert_msg(strstr(e->error->message, substr), "message: %s",
                  e->error->message);
    heapd__envelope__free_unpacked(e, NULL);
}

START_TEST(nursery_granted_with_its_slot_and_given_back)
{
    harness_start_with(&D, "young_size = 512K\n");
    heapd_client *ctl = harness_control(&D);
    ck_assert_uint_eq(young_segments(ctl), 0);
    struct raw r;
    raw_connect(&r);

    /* the heap's young_size, whole segments */
    Heapd__Envelope *e = raw_attach(&r, 1, true, 0, 0);
    ck_assert_int_eq(e->body_case, HEAPD__ENVELOPE__BODY_ATTACH_REPLY);
    ck_assert_uint_eq(e->attach_reply->young_segments, 4);
    ck_assert_uint_eq(e->attach_reply->young_age, 2);
    ck_assert_uint_ne(e->attach_reply->young_first, 0);
    uint32_t slot = e->attach_reply->slot;
    heapd__envelope__free_unpacked(e, NULL);
    ck_assert_uint_eq(young_segments(ctl), 4);

    /* asked for: 200K rounds up to 2 segments; the age as asked */
    e = raw_attach(&r, 2, true, 200u << 10, 5);
    ck_assert_int_eq(e->body_case, HEAPD__ENVELOPE__BODY_ATTACH_REPLY);
    ck_assert_uint_eq(e->attach_reply->young_segments, 2);
    ck_assert_uint_eq(e->attach_reply->young_age, 5);
    uint32_t slot2 = e->attach_reply->slot;
    heapd__envelope__free_unpacked(e, NULL);
    ck_assert_uint_eq(young_segments(ctl), 6);

    /* a plain attach is as before */
    e = raw_attach(&r, 3, false, 1u << 20, 0);
    ck_assert_int_eq(e->body_case, HEAPD__ENVELOPE__BODY_ATTACH_REPLY);
    ck_assert_uint_eq(e->attach_reply->young_segments, 0);
    heapd__envelope__free_unpacked(e, NULL);
    ck_assert_uint_eq(young_segments(ctl), 6);

    /* the clients report shows its size */
    heapd_client_info *info = NULL;
    size_t n = 0;
    ck_assert_int_eq(heapd_clients(ctl, &info, &n), 0);
    bool found = false;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < info[i].mutator_count; k++)
            if (info[i].mutators[k].slot == slot) {
                ck_assert_uint_eq(info[i].mutators[k].young_bytes, 4 * SEG);
                found = true;
            }
    ck_assert_msg(found, "the clients report lacks slot %u", slot);
    heapd_clients_free(info);

    raw_detach(&r, slot);
    ck_assert_uint_eq(young_segments(ctl), 2);
    (void)slot2;
    /* the connection closing (a crash, for heapd) frees the other one */
    raw_close(&r);
    wait_young(ctl, 0, "the nursery of a client gone is free");
    ck_assert_uint_eq(harness_stats(ctl).segments_owned, 0);
    heapd_disconnect(ctl);
    harness_stop_clean(&D);
}
END_TEST

START_TEST(nursery_requests_out_of_range_are_refused)
{
    harness_start_with(&D, "max_client_bytes = 1M\n");
    heapd_client *ctl = harness_control(&D);
    struct raw r;
    raw_connect(&r);
    heapd_stats_t before = harness_daemon_stats(&D);
    expect_error(raw_attach(&r, 1, true, 0, LAYOUT_YOUNG_AGE_MAX + 1),
                 HEAPD__ERROR_CODE__ERROR_BAD_REQUEST, "young_age 9");
    heapd_stats_t after = harness_daemon_stats(&D);
    ck_assert_uint_eq(after.frames_rejected, before.frames_rejected + 1);
    /* more than the quota: no room, whatever the heap has */
    expect_error(raw_attach(&r, 2, true, 2u << 20, 0),
                 HEAPD__ERROR_CODE__ERROR_NO_MEMORY, "max_client_bytes");
    /* more than a quarter of max_size (1G) */
    expect_error(raw_attach(&r, 3, true, 300u << 20, 0),
                 HEAPD__ERROR_CODE__ERROR_BAD_REQUEST, "a quarter");
    /* the quota fits one nursery of 1M, not two */
    Heapd__Envelope *e = raw_attach(&r, 4, true, 1u << 20, 0);
    ck_assert_int_eq(e->body_case, HEAPD__ENVELOPE__BODY_ATTACH_REPLY);
    heapd__envelope__free_unpacked(e, NULL);
    expect_error(raw_attach(&r, 5, true, 1u << 20, 0),
                 HEAPD__ERROR_CODE__ERROR_NO_MEMORY, "young_size");
    ck_assert_uint_eq(young_segments(ctl), 8);
    raw_close(&r);
    wait_young(ctl, 0, "the nursery of a client gone is free");
    heapd_disconnect(ctl);
    harness_stop_clean(&D);
}
END_TEST

/* The words of slot SLOT in R's control memory, mapped. */
static struct layout_mutator *raw_slot_words(struct raw *r, uint32_t region)
{
    void *p = mmap(NULL, LAYOUT_MUTATOR_BYTES, PROT_READ | PROT_WRITE,
                   MAP_SHARED, r->mem_fd,
                   (off_t)region * (off_t)LAYOUT_MUTATOR_BYTES);
    ck_assert_msg(p != MAP_FAILED, "cannot map the raw client's slot words");
    return p;
}

START_TEST(references_into_a_nursery_are_refused_and_garbage_traced)
{
    harness_start_with(&D, NULL);
    struct raw r;
    raw_connect(&r);
    Heapd__Envelope *e = raw_attach(&r, 1, true, 256u << 10, 0);
    ck_assert_int_eq(e->body_case, HEAPD__ENVELOPE__BODY_ATTACH_REPLY);
    uint32_t first = e->attach_reply->young_first;
    uint32_t segs = e->attach_reply->young_segments;
    uint32_t region = e->attach_reply->region;
    heapd__envelope__free_unpacked(e, NULL);
    ck_assert_uint_eq(segs, 2);
    uintptr_t run = (uintptr_t)r.base + (uintptr_t)first * SEG;

    /* the raw mutator is in a blocking region, as far as stops go: the
     * daemon marks its stack itself (Note [Stack marking handshake]) */
    struct layout_mutator *m = raw_slot_words(&r, region);
    atomic_store(&m->status, LAYOUT_STATUS(0, LAYOUT_MUT_BLOCKED));
    /* garbage in the nursery: random words, written through the memfd */
    size_t words = (size_t)segs * SEG / 8;
    uint64_t *junk = malloc(words * 8);
    ck_assert_ptr_nonnull(junk);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t k = 0; k < words; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        /* a quarter of them look like references into the run */
        junk[k] = k % 4 ? x : run + LAYOUT_YOUNG_START + (x % (words * 8));
    }
    ck_assert_int_eq(pwrite(r.heap_fd, junk, words * 8, (off_t)first * SEG),
                     (ssize_t)(words * 8));
    free(junk);
    /* the owner's roots point into it */
    void *_Atomic *roots = layout_mutator_roots(m);
    for (unsigned k = 0; k < 16; k++)
        atomic_store(&roots[k], (void *)(run + LAYOUT_YOUNG_START + 8 +
                                         (uintptr_t)k * 4096));
    atomic_store(&m->root_depth, 16);

    /* another client plants the nursery's address in a field, a global
     * and its own root stack */
    heapd_client *c;
    heapd_mutator *mu;
    harness_attach(&D, &c, &mu);
    void *young = (void *)(run + LAYOUT_YOUNG_START + 8);
    void **obj = heapd_alloc(mu, 1, 0);
    ck_assert_ptr_nonnull(obj);
    heapd_root_push(mu, obj);
    obj[0] = young; /* no barrier: that is the bug */
    ck_assert_int_eq(heapd_global_set(mu, "young-ref", young), 0);
    heapd_root_push(mu, young);
    heapd_stats_t before = harness_stats(c);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(heapd_collect(mu, HEAPD_COLLECT_WAIT), 0);
    heapd_stats_t after = harness_stats(c);
    ck_assert_uint_ge(after.young_refs_refused,
                      before.young_refs_refused + 3);
    ck_assert_uint_eq(after.bad_refs, before.bad_refs);
    ck_assert_uint_ge(after.cycles_completed, before.cycles_completed + 3);
    /* the object that held the planted field is alive and unchanged */
    ck_assert_ptr_eq(obj[0], young);
    ck_assert_uint_eq(heapd_nrefs(obj), 1);

    munmap(m, LAYOUT_MUTATOR_BYTES);
    raw_close(&r);
    heapd_detach(mu);
    heapd_disconnect(c);
    ck_assert_uint_gt(harness_still_serving(D.sock), 0);
    harness_stop_clean(&D);
}
END_TEST

static Suite *young_daemon_suite(void)
{
    Suite *s = suite_create("young_daemon");
    TCase *t = tcase_create("young_daemon");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, nursery_granted_with_its_slot_and_given_back);
    tcase_add_test(t, nursery_requests_out_of_range_are_refused);
    tcase_add_test(t, references_into_a_nursery_are_refused_and_garbage_traced);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main(young_daemon_suite());
}
