/* Young objects in the heap: the mark that makes a block young, the age in
 * its header, and the scan both sides use to find the shared references
 * young blocks hold (proto/young.c).
 *
 * Note [Young objects]
 * ~~~~~~~~~~~~~~~~~~~~
 * (After GHC's Note [Aging under the non-moving collector], without the
 * copying.)  A mutator that opts in at attach allocates young: in blocks
 * of its own current segments -- ordinary small segments its client holds
 * -- whose mark byte it sets to LAYOUT_MARK_YOUNG instead of the epoch.
 * Nothing else about the block differs: the object has the shared heap's
 * format (Note [Objects] in proto/layout.h), and its header's tag, which
 * in a shared object is the dirty tag (0 or an epoch), is LAYOUT_YOUNG_TAG
 * plus its age, the minor collections it has survived: the object's own
 * header tells a young object, in the cache line a store into it writes
 * anyway (heapd_write asks it of every store: GCBench spent a quarter of
 * its time looking the mark byte up instead).  Young objects never move: a minor
 * collection frees a dead one where it is (YOUNG -> 0), and promotes an
 * old one where it is (YOUNG -> the epoch: Note [Promotion in place] in
 * client/minor.c).  The rules that make this safe for everyone else:
 *   - only the owning mutator writes a YOUNG mark, and only from 0 (it
 *     allocates) or to 0 or an epoch (it frees or promotes); the daemon
 *     never writes one: its sweep leaves a YOUNG block alone and counts
 *     it in use, and its marker never marks one (a reference to a young
 *     block from anything but its owner is refused: Note [References to
 *     young objects] in daemon/gc/validate.c);
 *   - the epochs rotate through 1..239, so LAYOUT_MARK_YOUNG is never an
 *     epoch, nor 0, nor LAYOUT_MARK_CONT, and no dirty tag is a young
 *     tag: whoever reads a mark or a header tells a young object from
 *     every other kind;
 *   - a segment that holds a young block stays its client's: the mutator
 *     returns none that does (it frees or promotes its young blocks
 *     first), so the young blocks of a client that dies are all in the
 *     segments the daemon takes back from it, and it frees them there;
 *   - young objects are small-class objects (a larger one is allocated
 *     shared), never run-class ones.
 * Why in the client's ordinary segments and not in a nursery of their
 * own: publication and promotion become a store to a mark byte, where a
 * nursery run forced a copy into the shared heap (the shared map copied
 * every published value; GCBench promoted 148 MiB by copying), and a C
 * local never sees its object move.
 */
#ifndef HEAPD_PROTO_YOUNG_H
#define HEAPD_PROTO_YOUNG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layout.h"

#define LAYOUT_YOUNG_AGE_MAX 8u     /* young_age is 1..LAYOUT_YOUNG_AGE_MAX */

/* Does header H say its object is young (any mutator's)? */
static inline bool layout_header_young(uint64_t h)
{
    return layout_header_tag(h) >= LAYOUT_YOUNG_TAG;
}

typedef void (*young_emit_fn)(void *ctx, uintptr_t ref);

/* Note [Scanning young blocks]
 * ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
 * young_scan_segment emits every non-NULL reference field of every young
 * block of one small segment of class CLS, without following anything:
 * the daemon's preparatory push for a mutator that did not take its
 * stack handshake itself (Note [The preparatory push] in
 * client/minor.c) treats every young block of the client as live, since
 * it cannot see the mutator's C locals.  Its input may be anything
 * (another process can write into the segment), so a block's header is
 * trusted only as far as the block reaches: the fields read are those
 * that fit in the block, and each reference is emitted as it is, for the
 * caller to validate as any other (Note [Validating references] in
 * daemon/gc/validate.c).  The cost is a read of each mark byte and of the
 * fields of each young block: in proportion to the segment.  Returns the
 * young blocks seen.
 */
uint32_t young_scan_segment(const uint8_t *marks, const uint8_t *blocks,
                            uint32_t nblocks, uint32_t block_size,
                            young_emit_fn emit, void *ctx);

#endif
