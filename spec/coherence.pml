/*
 * coherence.pml -- netdir's coherence protocol, for Spin.
 *
 * What is modelled (see spec/README.md for how to run it and what it found):
 *   - one key; a CRAQ chain head H, middle M, tail T; NE extra copies (1 or 2);
 *   - the data plane (DP) in ToR mode: the slot of directory.Slot with
 *     ver_next, ver_done and the extras' fresh bits, and the rules of
 *     directory/process.go, with reads to non-fresh extras verified at the
 *     tail (VERIFY, issue 18);
 *   - the storage nodes' rules of storagenode/chain.go and storagenode/hot.go;
 *   - the controller's promotion handshake and, with -DEVICT, eviction and one
 *     re-promotion (controller/controller.go promote, evict);
 *   - with -DGROUP, write groups at the head (groups.md): two writes admitted
 *     together make one version, the absorbed one acknowledged by the head on
 *     the tail's ack (GPAIR, group_apply);
 *   - NC=2 clients, OPS operations each, at most WMAX writes in all, with
 *     timeouts (retransmission of the same request id) and retries after ERR
 *     stale-version / ERR retry (a new request id);
 *   - the network: one bounded bag of NET messages, so any message can
 *     overtake any other (reordering); LOSS messages may be dropped, DUP
 *     delivered twice; a send into a full bag is lost too (a bounded channel).
 *
 * Every rule below names the Go function that implements it. Each rule that
 * Spin can remove or weaken is guarded by a MUT_* macro (spin -DMUT_...); see
 * the Makefile target spec-mutants.
 *
 * Properties (assertions; each says which one failed):
 *   P1 linearizable reads: a read returns a version at least as new as the
 *      newest version any operation had observed when the read started
 *      (ghost maxobs); a write that starts after maxobs gets a newer version.
 *   P2 no write applied twice: the head applies each client operation at
 *      most once (ghost applied[]).
 *   P3 no acknowledged write lost: the version a write is acknowledged with
 *      was assigned to that write and to no other (ghost vop[]), or, with
 *      -DGROUP, made by the group that absorbed it (ghost vab[]); with P1
 *      this also says no later read returns anything older.
 *   P4 progress: once nothing is in flight (QUIET), the data plane has
 *      caught up with the tail (ver_done >= the tail's committed version) and
 *      no stamp is left pending (ver_next == ver_done), so extras can serve.
 *
 * Abstractions, stated once: a client's request passes the data plane in the
 * same step that the client sends it (loss or delay before the DP is the same
 * as after); a reply's DP step and its delivery to the client are one step
 * (the reply may still be lost after the DP: "drop" below); each dirty read
 * and each verified read asks the tail with its own query (storagenode
 * batches waiters in covered/next; see README); no node crashes; the
 * dedup table is unbounded; the controller's RPCs to the head are reliable (it retries) and
 * sequential; values are identified by versions (ghost vop[]).
 */

/* ---------------------------------------------------------------- fixes */
/* The fixes of spec/README.md, which the code has: the head is promoted
 * first and the slot seeded from its latest version and the plane's stamp
 * floor (FIX_SEED), an extra never goes back to an older copy (FIX_MONO),
 * and a tail rejoining catches up with its predecessor's latest version,
 * dirty included (FIX_REJOIN), and a stamp carries the switch's
 * incarnation, which the head checks (FIX_INC), and a node that missed a
 * layout catches up with its chains below the head and serves none while
 * a neighbour is at a newer epoch (FIX_MISSED). -DBEFORE_FIX models the
 * code before them (make spec-flaws). */
#ifndef BEFORE_FIX
#define FIX_SEED
#define FIX_MONO
#define FIX_REJOIN
#define FIX_INC
#define FIX_MISSED
#endif

/* Verified reads at extras (issue 18; on unless -DNO_VERIFY or
 * -DBEFORE_FIX, which models the code before them): a hit may go to an
 * extra whether or not its fresh bit is set; to a non-fresh extra the data
 * plane sets FlagVerify, and the extra answers such a read with the tail's
 * committed version, asked by a version query, never from its own copy.
 * Without VERIFY a hit goes to fresh extras only, as before. */
#if !defined(BEFORE_FIX) && !defined(NO_VERIFY)
#define VERIFY
#endif

/* ---------------------------------------------------------------- sizes */
#ifndef NE
#define NE 1            /* extra copies: 1 or 2 */
#endif
#ifndef NET
#define NET 7           /* messages in flight */
#endif
#ifndef LOSS
#define LOSS 1          /* messages the network may drop (besides overflow) */
#endif
#ifndef DUP
#define DUP 1           /* messages the network may deliver twice */
#endif
#ifndef MAXV
#define MAXV 4          /* versions 0..MAXV; the DP stops stamping at MAXV */
#endif
#ifndef WMAX
#define WMAX 2          /* writes, over both clients */
#endif
#ifndef OPS
#define OPS 2           /* operations per client */
#endif
#ifndef TMO
#define TMO 1           /* client timeouts (a resend of the same request), in all */
#endif
#ifndef RETX
#define RETX 1          /* the head's retransmissions of pending writes */
#endif
#ifndef FAULTS
#define FAULTS 1        /* losses, duplicates, timeouts and retransmissions, in all */
#endif
/* Which messages the network may duplicate (bits by type). Delivering a
 * copy later is, for most messages, what delaying the one message already
 * does, or is idempotent, or is what a timeout or retransmission does; what
 * is left is a write reaching the head twice (the dedup table) and, across
 * an eviction, old copies, VSBs, replies and demotes arriving again. */
#ifndef DUPTYPES
#ifdef EVICT
#define DUPTYPES ((1<<PUT)|(1<<CP)|(1<<VT)|(1<<VE)|(1<<PR)|(1<<DM))
#else
#define DUPTYPES 0      /* a write twice at the head: see TMO */
#endif
#endif
#define FAULT(n, cap) ((n) < (cap) && lost+dups+tmo+retx < FAULTS)
#ifdef EVICT
#define PROMOS 2        /* promote, evict, re-promote */
#else
#define PROMOS 1
#endif
#define NC 2
#define MAXATT 3        /* request ids per operation */

/* nodes */
#define H 0
#define M 1
#define T 2
#define X 3             /* extras are nodes X .. X+NE-1 */

/* ------------------------------------------------------------- messages */
#define GET 1   /* F1 node, F2 op, F3 FlagVerify       DP -> node        */
#define PUT 2   /* F1 op, F2 att, F3 stamped, F4 stamp DP -> head        */
                /*   F3: 0 unstamped, else 1 + the stamp's incarnation   */
#define CW  3   /* F1 M|T, F2 ver, F3 promoted, F4 rid  chain write       */
                /*   F5 (GROUP): absorbed rid + 1, 0 none              */
#define ACK 4   /* F1 H|M, F2 ver                       chain ack         */
#define VQ  5   /* F1 asker H|M|extra, F2 op            ver query to tail */
#define VA  6   /* F1 asker, F2 op, F3 ver              ver answer        */
#define GR  7   /* F1 op, F2 ver, F3 ok (0: wrong-node) get reply via DP  */
#define PR  8   /* F1 rid, F2 ver                       put reply via DP  */
#define ER  9   /* F1 rid, F2 code                      ERR via DP        */
#define CP  10  /* F1 extra, F2 ver                     copy to an extra  */
#define VT  11  /* F1 ver                               tail VSB to DP    */
#define VE  12  /* F1 extra, F2 ver                     extra's VSB to DP */
#define DM  13  /* F1 extra                             demote to extra   */

#define STALE 1 /* wire.CodeStaleVersion */
#define RETRY 2 /* wire.CodeRetry */

#define MK(t,a,b,c,d) (((t)<<16)|((a)<<12)|((b)<<8)|((c)<<4)|(d))
#define TY(m) (((m)>>16)&15)
#define F5(m) (((m)>>20)&15)
#define F1(m) (((m)>>12)&15)
#define F2(m) (((m)>>8)&15)
#define F3(m) (((m)>>4)&15)
#define F4(m) ((m)&15)

#define RID(op,att) (((op)-1)*MAXATT+(att))
#define NORID 15        /* a no-op version's request id: no requester, no reply */
#define RIDOP(r) ((r)/MAXATT+1)
#define BIT(v) (1<<(v))
#define UPTO(v) ((2<<(v))-1)    /* bits 0..v */

int net[NET];                   /* the bag, kept sorted (descending), 0 = free */
byte lost, dups, retx, tmo;
bool ovf;                       /* the bag overflowed: the run is cut */

/* ------------------------------------------------------------ data plane */
bool cached;                    /* the key is in the directory */
byte vnext, vdone;              /* Slot.VerNext, Slot.VerDone */
byte fresh;                     /* Slot.Fresh, extras' bits only (the chain is always fresh) */
byte sfloor;                     /* highest stamp ever issued (FIX_SEED) */
/* Incarnations (FIX_INC; wire/stamp.go): cinc the controller's (the
 * raft state's), sinc the slot's (the entry's seed: stamped above every
 * version), hinc the head's promotion's. A stamp is (incarnation,
 * version); only the versions are ordered as versions. */
byte cinc, sinc, hinc;
#define STAMPINC(msg) (F3(msg) - 1)     /* a stamped PUT's incarnation */

/* ---------------------------------------------------------------- nodes */
byte hclean, hdirty, hpend;     /* head: clean version, dirty set, pending set (bit v) */
bool promoted;                  /* head: Node.promo holds the key */
byte prid[MAXV+1];              /* head: request id of the pending write of version v */
byte pprom;                     /* head: pending write v was first forwarded promoted (bit v) */
/* the promoted flag a re-forward of pending version v carries: as
 * implemented, (*shard).forward reads the promotion again; FIX_FORWARD keeps
 * the flag of the first forward */
#ifdef FIX_FORWARD
#define REFWD(v) ((pprom >> (v)) & 1)
#else
#define REFWD(v) promoted
#endif
byte dd[NC*OPS*MAXATT];         /* head: dedup table by request id: code<<4|ver, 0 = none */
/* -DGROUP: write groups at the head (groups.md; see GPAIR and
 * group_apply). pab[v]: the request id + 1 of the write absorbed into
 * pending version v (0 none), which the head acknowledges when the tail's
 * ack for v reaches it; the chain write carries it (F5) so that the middle
 * and the tail remember it. */
#ifdef GROUP
byte pab[MAXV+1];
#define PAB(v) pab[v]
#else
#define PAB(v) 0
#endif
/* a chain write of version v with request id r and absorbed request id + 1
 * a; the mutant chain-no-absorbed leaves the absorbed id out of it */
#ifndef MUT_CHAIN_NO_ABSORBED
#define CWMSG(d, v, p, r, a) (MK(CW, d, v, p, r) | ((a) << 20))
#else
#define CWMSG(d, v, p, r, a) MK(CW, d, v, p, r)
#endif
byte mclean, mdirty;            /* middle */
byte tclean;                    /* tail (setClean only, never dirty) */
/* -DFAIL_TAIL: the tail T dies and is spliced out (layout epoch+1, M is the
 * tail), then restarts, catches up (OpSync) and rejoins as tail. tst: 0 T in
 * the chain, 1 T dead and spliced out, 2 T back (once per run), 3 (with
 * -DTAIL_SKIP) T restarted with the layout it was started with, where it
 * is still the tail, not having heard the splice (flaw I). */
byte tst;
#define TUP (tst == 0 || tst == 2)
/* -DFAIL_MID, -DFAIL_HEAD: the middle M, or the head H, dies and is spliced
 * out (layout epoch+1, chain H T or M T), once per run, at any time; the
 * node does not come back (a rejoin is as a tail: -DFAIL_TAIL). mst: 0 all
 * in the chain, 1 M's place gone. With FAIL_HEAD, M takes over as head: its
 * state moves into the head's variables (hclean, hdirty, hpend, prid, dd),
 * and M's place is what is gone, so both failures leave the chain "H T". */
#if defined(FAIL_MID) || defined(FAIL_HEAD)
byte mst;
#define MGONE (mst == 1)
#define HSUCC (MGONE -> T : M)          /* the head's successor */
#define TPRED (MGONE -> H : M)          /* the tail's predecessor */
#else
#define MGONE 0
#define HSUCC M
#define TPRED M
#endif
#ifdef FAIL_HEAD
byte mrid[MAXV+1];              /* middle: request id of its version v (version.ReqID) */
#ifdef GROUP
/* With GROUP (two writes per run), M records every request id a chain
 * write carries, the absorbed one included, with its version, as
 * (*shard).remember does (mdd, same coding as dd), and the new head's
 * dedup table is M's (adopt): a retry of a write older than M's versions,
 * overwritten or absorbed, is answered, never applied again. mab[v]: the
 * absorbed request id + 1 of M's version v, which the new head
 * acknowledges when v, adopted as pending, commits. */
byte mab[MAXV+1];
byte mdd[NC*OPS*MAXATT];
bit mgot[NC*OPS+1];             /* ghost: the ops whose version reached M (index 0: none) */
#define MABPEND(v, a) pab[v] = (a)
#define MDD(r) mdd[r]
#define MDDCLR(r) mdd[r] = 0
#define MABCLR(v) mab[v] = 0
#else
#define MABPEND(v, a) skip
#define MDD(r) 0
#define MDDCLR(r) skip
#define MABCLR(v) skip
#endif
#define MREAD 1                 /* a read routed to M reaches the new head */
#else
#define MREAD (!MGONE)
#endif
#ifndef MDD
#define MDD(r) 0
#define MDDCLR(r) skip
#endif
#define TAILC (TUP -> tclean : mclean)  /* the committed version at the tail */
byte ex[NE];                    /* extras: 0 = no copy, else held version + 1 */
byte exmax[NE];                 /* extras: highest version ever held (FIX_MONO) */

/* ----------------------------------------------------------- controller */
byte ctl;                       /* handshake step, see the controller options */
byte promos;                    /* promotions done */
byte seed;                      /* head's latest at promote (FIX_SEED) */
/* -DFAILOVER: the leader dies with a promotion reserved (head promoted, slot
 * not installed); stale: its Insert may still reach the switch, with its old
 * election id. -DSWLOSS: swl 1 once the switch has lost its state. */
bool stale;
byte oldseed, swl;

/* -------------------------------------------------------------- clients */
byte cpc[NC];                   /* 0 idle, 1 reading, 2 writing */
byte cop[NC], catt[NC], cfloor[NC], cn[NC];
byte wleft = WMAX;
/* each client's program: op k of client c is a read (PR_R), a write (PR_W)
 * or either (PR_A, the writes bounded by WMAX) */
#define PR_R 1
#define PR_W 2
#define PR_A 3
#define PR_N 0          /* no operation: the client stops */
#ifndef PROG0
#define PROG0 PR_R      /* client 0: read, read */
#endif
#ifndef PROG1
#define PROG1 PR_R
#endif
#ifndef PROG2
#define PROG2 PR_W      /* client 1: write, write */
#endif
#ifndef PROG3
#define PROG3 PR_W
#endif
#define PROGS (PROG0 | PROG1 << 2 | PROG2 << 4 | PROG3 << 6)
#define KIND(c) ((PROGS >> (2*((c)*OPS+cn[c]))) & 3)

/* ---------------------------------------------------------------- ghosts */
byte maxobs;                    /* newest version any completed op observed */
byte vop[MAXV+1];               /* op that the head assigned version v */
bit applied[NC*OPS+1];          /* op applied at the head */
#ifdef GROUP
byte vab[MAXV+1];               /* op absorbed into version v's group */
#endif

/* scratch, not part of the state (-DNOHIDDEN for pan -DBFS, which wants
 * no hidden variables; every step then zeroes them, see CLEAN) */
#ifdef NOHIDDEN
#define HIDDEN
#else
#define HIDDEN hidden
#endif
HIDDEN int m, k2;
HIDDEN byte k, j, lt, v0, e0;
HIDDEN byte found;
#ifdef GROUP
/* the group being admitted: its version so far, the last accepted write's
 * request id and op, the absorbed write's request id + 1 and op */
HIDDEN byte gv, grid, gop, gab, gabop, gno;
HIDDEN int gm;
#define CLEAN m = 0; k2 = 0; k = 0; j = 0; lt = 0; v0 = 0; e0 = 0; found = 0; gv = 0; grid = 0; gop = 0; gab = 0; gabop = 0; gno = 0; gm = 0
#else
#define CLEAN m = 0; k2 = 0; k = 0; j = 0; lt = 0; v0 = 0; e0 = 0; found = 0
#endif

/* ------------------------------------------------------------ the bag */
inline send(x) {
	if
	:: net[NET-1] != 0 -> ovf = 1       /* full: the run is cut (bounded channels) */
	:: else ->
		k = NET-1;
		do
		:: k > 0 && net[k-1] < (x) -> net[k] = net[k-1]; k--
		:: else -> break
		od;
		net[k] = (x)
	fi
}
inline rm(i) {
	k = i;
	do
	:: k < NET-1 -> net[k] = net[k+1]; k++
	:: else -> break
	od;
	net[NET-1] = 0
}
inline inbag(x) {
	found = 0;
	k = 0;
	do
	:: k < NET -> if :: net[k] == (x) -> found = 1 :: else fi; k++
	:: else -> break
	od
}
/* the same test as an expression, for guards */
#define NOTAT(i, x) (NET <= i || net[i] != (x))
#define NOTINBAG(x) (NOTAT(0,x) && NOTAT(1,x) && NOTAT(2,x) && NOTAT(3,x) && NOTAT(4,x) && NOTAT(5,x) && NOTAT(6,x) && NOTAT(7,x))
inline sendnew(x) {             /* periodic resends: only if not already in flight */
	k2 = (x);
	inbag(k2);
	if :: !found -> send(k2) :: else fi
}

/* ------------------------------------------------------------ helpers */
inline latest(dirty, clean) {   /* record.Latest */
	lt = clean; k = 1;
	do
	:: k <= MAXV -> if :: (dirty) & BIT(k) -> lt = k :: else fi; k++
	:: else -> break
	od
}
inline max2(a, b) { if :: (b) > (a) -> a = (b) :: else fi }

/* ------------------------------------------------ data plane: the rules */

/* (*Slot).complete: a put-reply (directory.(*Directory).reply) or the
 * tail's VSB (directory.(*Directory).vsb, tail case) for version v. */
inline complete(v) {
	if
	:: cached && (v) > vdone ->
		printf("  DP complete %d: ver_done %d -> %d, extras cleared\n", v, vdone, v);
		vdone = (v);
		max2(vnext, v);
#ifndef MUT_NO_CLEAR_AT_COMPLETE
		fresh = 0
#else
		skip
#endif
	:: else
	fi
}

/* directory.(*Directory).write: a PUT/DEL. Hit: clear the extras, stamp
 * ver_next+1, forward to the head. Miss: unstamped, to the head. */
inline dp_write(c) {
	if
	:: cached ->
#ifndef MUT_NO_CLEAR_AT_STAMP
		fresh = 0;
#endif
		vnext++;
		printf("  DP stamps op %d att %d with %d\n", cop[c], catt[c], vnext);
		max2(sfloor, vnext);
		send(MK(PUT, cop[c], catt[c], 1 + sinc, vnext))
	:: else ->
		printf("  DP miss: op %d att %d unstamped\n", cop[c], catt[c]);
		send(MK(PUT, cop[c], catt[c], 0, 0))
	fi
}
/* dp_write needs a stamp below MAXV (a bound of the model, not a rule) */
#define CANWRITE (!cached || vnext < MAXV)

/* directory.(*Directory).get: the DP may send a read to node n. A hit goes
 * to a LocationList member holding a bucket: with VERIFY any extra, fresh
 * or not (every extra holds one here), else a fresh one only (the chain is
 * always fresh); a miss to a chain member (CRAQ). */
#define XFRESH(n) (fresh & BIT((n)-X))
#ifdef VERIFY
#define CANREAD(n) (((n) < X && ((n) != T || TREAD) && ((n) != M || MREAD)) || ((n) >= X && cached))
#else
#define CANREAD(n) (((n) < X && ((n) != T || TREAD) && ((n) != M || MREAD)) || ((n) >= X && cached && XFRESH(n)))
#endif
/* ... and sets FlagVerify on a read it sends to a non-fresh extra; a chain
 * member gets no flag (a dirty member asks the tail anyway). The mutant
 * no-verify-flag routes as VERIFY does but never sets the flag. */
#if defined(VERIFY) && !defined(MUT_NO_VERIFY_FLAG)
#define VFLAG(n) ((n) >= X && !XFRESH(n))
#else
#define VFLAG(n) 0
#endif
/* reads routed to T: with -DTAIL_SKIP once it has restarted (by a data
 * plane or a client whose table lags the splice, and as the rejoined tail);
 * before its death only through M's ver-queries, to keep the state space */
#ifdef TAIL_SKIP
#define TREAD (tst >= 2)
#else
#define TREAD TUP
#endif

/* directory.(*Directory).vsb, extra case: set e's fresh bit only if the key
 * is cached, no write is pending and v == ver_done. */
#ifndef MUT_VSB_PENDING
#define NOPENDING (vnext == vdone)
#else
#define NOPENDING 1
#endif
#ifndef MUT_VSB_VERSION
#define SAMEVER(v) ((v) == vdone)
#else
#define SAMEVER(v) 1
#endif
inline dp_vsb_extra(e, v) {
	if
	:: cached && NOPENDING && SAMEVER(v) -> fresh = fresh | BIT(e);
		printf("  DP accepts VSB(extra %d, v%d): fresh (ver_next %d ver_done %d)\n", e, v, vnext, vdone)
	:: else        /* dropped: vsb-not-cached, vsb-pending, vsb-version */
		printf("  DP drops VSB(extra %d, v%d) (cached %d ver_next %d ver_done %d)\n", e, v, cached, vnext, vdone)
	fi
}

/* ------------------------------------------------ storage nodes: the rules */

/* storagenode (*shard).announce: the tail's VSB (sent with the tail's id,
 * by the tail or by the head) and a copy of the clean version to each extra. */
inline announce(v) {
#ifndef MUT_NO_TAIL_VSB
	send(MK(VT, v, 0, 0, 0));
#endif
	e0 = 0;
	do
	:: e0 < NE -> send(MK(CP, e0, v, 0, 0)); e0++
	:: else -> break
	od
}

#ifdef MUT_HEAD_NONINCREASING
#define MUT_NONINC 1
#else
#define MUT_NONINC 0
#endif
#ifdef MUT_UNSTAMPED_AFTER_PROMOTION
#define MUT_UNSTAMPED 1
#else
#define MUT_UNSTAMPED 0
#endif
/* storagenode (*copies).staleIncarnation: a stamped write to a promoted
 * key whose stamp's incarnation is older than the promotion's was stamped
 * by a switch that has since lost its state (flaw G): refused as stale. */
#if defined(FIX_INC) && !defined(MUT_NO_INC_CHECK)
#define OLDINC(msg) (F3(msg) && promoted && STAMPINC(msg) < hinc)
#else
#define OLDINC(msg) 0
#endif

/* storagenode (*shard).noop: a stamped duplicate's stamp v, above the
 * head's latest version, becomes a no-op version: the latest value again
 * under v (values are versions here, so nothing records which), forwarded
 * like any write but with no requester (NORID: the tail sends no put-reply)
 * and no dedup entry. The tail announces it if promoted (chain_write), which
 * completes v at the data plane. */
inline noop(v) {
	printf("  head makes the stamp %d a no-op version\n", v);
	hdirty = hdirty | BIT(v);       /* v > latest >= hclean */
	hpend = hpend | BIT(v);
	prid[v] = NORID;
#ifdef FIX_FORWARD
	if :: promoted -> pprom = pprom | BIT(v) :: else -> pprom = pprom & ~BIT(v) fi;
#endif
	send(CWMSG(HSUCC, v, promoted, NORID, 0))
}

/* With GROUP every write is taken in a group (group_apply): "the latest" includes
 * the version the group's accepted writes took so far (GLATEST); a
 * duplicate of a write accepted in this group is answered by the group's
 * chain write (INGROUP); a stamped duplicate's no-op version is made after
 * the group's version, so that it copies the group's value, and only if
 * its stamp is still above the latest then (NOOP). */
#ifdef GROUP
#define GLATEST max2(lt, gv)
#define INGROUP(v) (gv != 0 && (v) == gv)
#define NOOP(v) max2(gno, v)
#else
#define GLATEST skip
#define INGROUP(v) 0
#define NOOP(v) noop(v)
#endif

/* storagenode (*shard).write at the head. */
inline head_write(msg) {
	j = RID(F1(msg), F2(msg));
#ifndef MUT_NO_DEDUP
	if
	:: dd[j] != 0 ->                /* duplicate: answered from the dedup table */
		if
		:: (dd[j] >> 4) != 1 -> send(MK(ER, j, (dd[j] >> 4) - 1, 0, 0))
		:: (dd[j] >> 4) == 1 && INGROUP(dd[j] & 15) -> skip     /* the group's chain write answers it */
		:: (dd[j] >> 4) == 1 && (hpend & BIT(dd[j] & 15)) ->
			send(CWMSG(HSUCC, dd[j] & 15, REFWD(dd[j] & 15), prid[dd[j] & 15], PAB(dd[j] & 15)))
		:: else -> send(MK(PR, j, dd[j] & 15, 0, 0))
		fi;
#ifndef MUT_NO_NOOP_VERSION
		latest(hdirty, hclean); GLATEST;
		if                          /* the DP stamped the resend: make the stamp real */
		:: F3(msg) && F4(msg) > lt && F4(msg) <= MAXV && !OLDINC(msg) -> NOOP(F4(msg))
		:: else
		fi
#else
		skip
#endif
	:: else ->
#endif
		latest(hdirty, hclean); GLATEST;
		if
		:: OLDINC(msg) ->                /* a stamp of an older incarnation */
			printf("  head refuses op %d's stamp of incarnation %d (promoted in %d)\n", F1(msg), STAMPINC(msg), hinc);
			dd[j] = (1+STALE) << 4 | lt;
			send(MK(ER, j, STALE, 0, 0))
		:: F3(msg) && F4(msg) <= lt && !MUT_NONINC && !OLDINC(msg) ->   /* stale stamp */
			dd[j] = (1+STALE) << 4 | lt;
			send(MK(ER, j, STALE, 0, 0))
		:: !F3(msg) && promoted && !MUT_UNSTAMPED ->   /* unstamped write to a promoted key */
			dd[j] = (1+RETRY) << 4 | lt;
			send(MK(ER, j, RETRY, 0, 0))
		:: else ->
			if
			:: F3(msg) -> v0 = F4(msg)
			:: else -> v0 = lt + 1
			fi;
			if
			:: v0 > MAXV -> skip    /* bound of the model: not applied, no reply */
			:: else ->
				/* P2: no write applied twice */
				printf("  head applies op %d as v%d\n", F1(msg), v0);
				assert(!applied[F1(msg)]);
				applied[F1(msg)] = 1;
#ifdef GROUP
				/* in a group: the write before it is absorbed, and
				 * its dedup entry moves to the group's version */
				if
				:: gv != 0 -> gab = grid + 1; gabop = gop; dd[grid] = 1 << 4 | v0
				:: else
				fi;
				gv = v0; grid = j; gop = F1(msg);
				dd[j] = 1 << 4 | v0
#else
				if :: vop[v0] == 0 -> vop[v0] = F1(msg) :: else fi;
				if                  /* record.addDirty */
				:: v0 > hclean -> hdirty = hdirty | BIT(v0)
				:: else
				fi;
				dd[j] = 1 << 4 | v0;
				hpend = hpend | BIT(v0);
				prid[v0] = j;
#ifdef FIX_FORWARD
				if :: promoted -> pprom = pprom | BIT(v0) :: else -> pprom = pprom & ~BIT(v0) fi;
#endif
				send(MK(CW, HSUCC, v0, promoted, j))   /* (*shard).forward */
#endif
			fi
		fi
#ifndef MUT_NO_DEDUP
	fi
#endif
}

#ifdef GROUP
/* The head admits a group (groups.md 2-4): the writes waiting at that
 * moment, each taken by head_write's rules in arrival order (refusals
 * answered at once), then group_apply. The accepted ones make ONE version,
 * the last accepted write's (version and value); the one before it is
 * absorbed: its dedup entry maps to the group's version, the chain write
 * carries its request id, and the head acknowledges it when the tail's ack
 * reaches it (chain_ack). */
inline group_apply() {
#ifdef MUT_LATE_JOIN
	/* mutant: a write admitted alone joins the group of a version already
	 * applied and pending (the highest), acknowledged with that version */
	if
	:: gv != 0 && gab == 0 ->
		k = MAXV;
		do
		:: k > 0 && (!(hpend & BIT(k)) || pab[k] != 0 || prid[k] == NORID) -> k--
		:: else -> break
		od;
		if
		:: k > 0 ->
			printf("  head joins op %d to the applied group of v%d\n", gop, k);
			dd[grid] = 1 << 4 | k; pab[k] = grid + 1; vab[k] = gop; gv = 0
		:: else
		fi
	:: else
	fi;
#endif
	if
	:: gv != 0 ->
		if
		:: gab != 0 -> printf("  head applies the group as v%d: op %d, absorbed op %d\n", gv, gop, gabop)
		:: else -> printf("  head applies the group as v%d: op %d alone\n", gv, gop)
		fi;
		if :: vop[gv] == 0 -> vop[gv] = gop :: else fi;
		vab[gv] = gabop;
		if                          /* record.addDirty */
		:: gv > hclean -> hdirty = hdirty | BIT(gv)
		:: else
		fi;
		hpend = hpend | BIT(gv);
		prid[gv] = grid;
		pab[gv] = gab;
#ifdef FIX_FORWARD
		if :: promoted -> pprom = pprom | BIT(gv) :: else -> pprom = pprom & ~BIT(gv) fi;
#endif
		send(CWMSG(HSUCC, gv, promoted, grid, gab));     /* (*shard).forward */
#ifdef MUT_ACK_AT_APPLY
		/* mutant: the absorbed write is acknowledged now, not on the tail's ack */
		if :: gab != 0 -> send(MK(PR, gab - 1, gv, 0, 0)); pab[gv] = 0 :: else fi;
#endif
		skip
	:: else
	fi;
	if
	:: gno != 0 -> latest(hdirty, hclean); if :: gno > lt -> noop(gno) :: else fi
	:: else
	fi
}
#define HEADPUT(msg) head_write(msg); group_apply()
#else
#define HEADPUT(msg) head_write(msg)
#endif

/* storagenode (*shard).chainWrite. */
inline chain_write(msg) {
	v0 = F2(msg);
	if
	:: F1(msg) == M && MGONE -> skip        /* to a dead M, or to M now heading (pos 0): dropped */
	:: F1(msg) == M && TUP ->
		if :: v0 > mclean -> mdirty = mdirty | BIT(v0) :: else fi;
#ifdef FAIL_HEAD
		mrid[v0] = F4(msg);
#ifdef GROUP
		mab[v0] = F5(msg);
		if :: F4(msg) != NORID -> mdd[F4(msg)] = 1 << 4 | v0 :: else fi;    /* (*shard).remember */
		if :: F5(msg) != 0 -> mdd[F5(msg) - 1] = 1 << 4 | v0 :: else fi;
		mgot[vop[v0]] = 1; mgot[vab[v0]] = 1;    /* ghost */
#endif
#endif
		send(CWMSG(T, v0, F3(msg), F4(msg), F5(msg)))
	:: F1(msg) == M ->              /* M is the tail while T is spliced out */
		if :: v0 > mclean -> mclean = v0; mdirty = mdirty & ~UPTO(v0) :: else fi;
		if :: F4(msg) != NORID -> send(MK(PR, F4(msg), v0, 0, 0)) :: else fi;
		if :: F3(msg) -> announce(mclean) :: else fi;
		send(MK(ACK, H, v0, 0, 0))
	:: F1(msg) == T && !TUP -> skip         /* to a dead node, or sent before it died: lost */
	:: else ->                      /* tail: commit, reply, announce, ack */
		max2(tclean, v0);
		if :: F4(msg) != NORID -> send(MK(PR, F4(msg), v0, 0, 0)) :: else fi;   /* a no-op: no requester */
		if :: F3(msg) -> announce(tclean) :: else fi;
		send(MK(ACK, TPRED, v0, 0, 0))
	fi
}

/* storagenode (*shard).chainAck with record.commit. */
inline chain_ack(msg) {
	v0 = F2(msg);
	if
	:: F1(msg) == M ->
		if
		:: mdirty & BIT(v0) -> mclean = v0; mdirty = mdirty & ~UPTO(v0)
		:: else
		fi;
		send(MK(ACK, H, v0, 0, 0))
	:: else ->
		if
		:: hdirty & BIT(v0) -> hclean = v0; hdirty = hdirty & ~UPTO(v0)
		:: else
		fi;
#ifdef GROUP
		/* the version is committed: the head acknowledges the write its
		 * group absorbed, with the group's version */
		if
		:: (hpend & BIT(v0)) && pab[v0] != 0 -> send(MK(PR, pab[v0] - 1, v0, 0, 0))
		:: else
		fi;
		pab[v0] = 0;
#endif
		hpend = hpend & ~BIT(v0);
		prid[v0] = 0;           /* dead once not pending: states merge */
#ifdef FIX_FORWARD
		pprom = pprom & ~BIT(v0);
#endif
		if
		:: promoted && hdirty == 0 && hclean > 0 -> announce(hclean)
		:: else
		fi
	fi
}

#ifdef MUT_DIRTY_READ_CLEAN
#define MUT_DRC 1
#else
#define MUT_DRC 0
#endif

/* storagenode (*shard).verQuery: the tail answers with its latest version
 * (M while T is spliced out, or restarted at an older epoch: TAIL_SKIP). */
inline tail_latest() {
	if :: TUP -> lt = tclean :: else -> latest(mdirty, mclean) fi
}

/* storagenode (*shard).query: node asker (a dirty chain member, or an extra
 * with a verified read) asks the tail which version is committed; the
 * answer (ver_answer) is the read's reply. With -DQUERY_MSGS the query and
 * its answer are messages; without, the three steps are one, at the GET's
 * delivery (the tail's committed version only grows, so a later answer is
 * one of the interleavings where the GET arrived later). */
inline ask_tail(asker, op) {
#ifdef QUERY_MSGS
	send(MK(VQ, asker, op, 0, 0))
#else
	tail_latest();
	ver_answer(MK(VA, asker, op, lt, 0))
#endif
}

/* storagenode (*shard).get at an extra (a node outside the key's chain):
 * a verified read asks the tail, with the version of its copy (0 if none;
 * the tail adds the value only if it differs: values are versions here, so
 * the model does not tell the two answers apart) and answers with the
 * tail's committed version, never older than its copy (copies are sent
 * only after commit); a read without the flag is served from the copy (the
 * DP sent it there because the copy is fresh), or refused as wrong-node if
 * there is none. The mutant verify-own-copy serves a verified read from
 * its copy. */
#if defined(VERIFY) && !defined(MUT_VERIFY_OWN_COPY)
#define VERIFIED(msg) F3(msg)
#else
#define VERIFIED(msg) 0
#endif
inline extra_get(msg) {
	if
	:: VERIFIED(msg) -> ask_tail(F1(msg), F2(msg))
	:: !VERIFIED(msg) && ex[F1(msg)-X] == 0 -> send(MK(GR, F2(msg), 0, 0, 0))  /* ERR wrong-node */
	:: !VERIFIED(msg) && ex[F1(msg)-X] != 0 -> send(MK(GR, F2(msg), ex[F1(msg)-X]-1, 1, 0))
	fi
}

/* storagenode (*shard).get: extras as above; a clean chain member serves
 * its clean version (the tail its latest); a dirty one asks the tail. */
inline node_get(msg) {
	if
	:: F1(msg) >= X -> extra_get(msg)
	:: F1(msg) == T && tst == 1 -> skip         /* to a dead node: lost */
#if defined(FIX_MISSED) && !defined(MUT_SERVE_OLD_EPOCH)
	:: F1(msg) == T && tst == 3 -> skip         /* (*Node).serves: unavailable (its answer, and the client's retry elsewhere, are not modelled) */
#endif
	:: F1(msg) == M && MGONE -> skip            /* to a dead M: lost */
	:: F1(msg) == T -> send(MK(GR, F2(msg), tclean, 1, 0))
	:: F1(msg) == M && !TUP -> latest(mdirty, mclean); send(MK(GR, F2(msg), lt, 1, 0))  /* a tail serves its latest */
	:: F1(msg) == H && (hdirty == 0 || MUT_DRC) -> send(MK(GR, F2(msg), hclean, 1, 0))
	:: F1(msg) == M && (mdirty == 0 || MUT_DRC) -> send(MK(GR, F2(msg), mclean, 1, 0))
	:: else -> ask_tail(F1(msg), F2(msg))
	fi
}

/* storagenode (*shard).verAnswer with record.setClean (at a chain member;
 * an extra keeps its copy as it is). */
inline ver_answer(msg) {
	v0 = F3(msg);
	send(MK(GR, F2(msg), v0, 1, 0));
	if
	:: v0 > 0 && F1(msg) == H && v0 > hclean -> hclean = v0; hdirty = hdirty & ~UPTO(v0)
	:: v0 > 0 && F1(msg) == M && v0 > mclean -> mclean = v0; mdirty = mdirty & ~UPTO(v0)
	:: else
	fi
}

/* storagenode (*shard).copyIn: keep the newer copy, announce what is held.
 * FIX_MONO: an extra keeps, after a demote, the highest version it held, and
 * takes no copy older than that, so what it holds never goes back. */
inline copy_in(msg) {
	e0 = F1(msg);
#ifdef FIX_MONO
	if
	:: F2(msg) < exmax[e0] -> skip                      /* an old copy: ignored */
	:: else ->
		if :: ex[e0] == 0 || F2(msg)+1 > ex[e0] -> ex[e0] = F2(msg)+1 :: else fi;
		exmax[e0] = ex[e0]-1;
		send(MK(VE, e0, ex[e0]-1, 0, 0))
	fi
#else
	if
	:: ex[e0] == 0 || F2(msg)+1 > ex[e0] -> ex[e0] = F2(msg)+1
	:: else
	fi;
	send(MK(VE, e0, ex[e0]-1, 0, 0))
#endif
}

/* storagenode (*shard).demote at an extra: drop the copy. */
inline demote_extra(msg) {
	ex[F1(msg)] = 0
}

/* ------------------------------------------------------------- clients */

/* client c's operation completes. Replies still in flight for it can have no
 * effect on anything but the DP (put-replies), so the others are removed:
 * this only merges states. */
inline finish(c) {
	cpc[c] = 0; cn[c]++;
	k2 = 0;
	do
	:: k2 < NET ->
		if
		:: (TY(net[k2]) == GR && F1(net[k2]) == cop[c]) ||
		   (TY(net[k2]) == ER && RIDOP(F1(net[k2])) == cop[c]) -> rm(k2)
		:: else -> k2++
		fi
	:: else -> break
	od;
	cop[c] = 0; catt[c] = 0; cfloor[c] = 0     /* dead while idle: states merge */
}

/* a reply reaches client c: the checks of P1 and P3 */
inline client_reply(msg) {
	if
	:: TY(msg) == GR ->
		e0 = (F1(msg)-1) / OPS;     /* client of the op */
		if
		:: cpc[e0] == 1 && cop[e0] == F1(msg) && F3(msg) ->
			printf("  client %d read op %d returns v%d (floor %d)\n", e0, F1(msg), F2(msg), cfloor[e0]);
			/* P1: a read returns at least what was observed before it began */
			assert(F2(msg) >= cfloor[e0]);
			max2(maxobs, F2(msg));
			finish(e0)
		:: else                     /* stale, or wrong-node: the client times out */
		fi
	:: TY(msg) == PR ->
		e0 = (RIDOP(F1(msg))-1) / OPS;
		if
		:: cpc[e0] == 2 && RID(cop[e0], catt[e0]) == F1(msg) ->
			printf("  client %d write op %d acked v%d (floor %d)\n", e0, cop[e0], F2(msg), cfloor[e0]);
			/* P3: the acknowledged version is this write's, and only its */
#ifdef GROUP
			/* ... or the write its group absorbed */
			assert(vop[F2(msg)] == cop[e0] || vab[F2(msg)] == cop[e0]);
#else
			assert(vop[F2(msg)] == cop[e0]);
#endif
			/* P1: a write that began after maxobs is ordered after it */
			assert(F2(msg) > cfloor[e0]);
			max2(maxobs, F2(msg));
			finish(e0)
		:: else
		fi
	:: TY(msg) == ER ->
		e0 = (RIDOP(F1(msg))-1) / OPS;
		if
		:: cpc[e0] == 2 && RID(cop[e0], catt[e0]) == F1(msg) ->
			if          /* stale-version or retry: again with a new request id */
			:: catt[e0] < MAXATT-1 && CANWRITE ->
				catt[e0]++;
				dp_write(e0)
			:: else     /* out of request ids (a bound): the write stays pending */
			fi
		:: else
		fi
	fi
}

/* directory.(*Directory).reply: a put-reply completes its version */
#ifndef MUT_REPLY_NO_RAISE
#define REPLY_COMPLETE(v) complete(v)
#else
#define REPLY_COMPLETE(v) skip
#endif

/* the log of a trail (spin -t): a message by name */
inline pmsg(x) {
	if
	:: TY(x) == GET && F3(x) -> printf("GET(node %d, op %d, verify)", F1(x), F2(x))
	:: TY(x) == GET -> printf("GET(node %d, op %d)", F1(x), F2(x))
	:: TY(x) == PUT && F3(x) -> printf("PUT(op %d att %d, stamp %d, incarnation %d)", F1(x), F2(x), F4(x), STAMPINC(x))
	:: TY(x) == PUT -> printf("PUT(op %d att %d, unstamped)", F1(x), F2(x))
	:: TY(x) == CW && F5(x) -> printf("CHAIN-WRITE(to %d, v%d, promoted %d, absorbed op %d att %d)", F1(x), F2(x), F3(x), RIDOP(F5(x)-1), (F5(x)-1) % MAXATT)
	:: TY(x) == CW  -> printf("CHAIN-WRITE(to %d, v%d, promoted %d)", F1(x), F2(x), F3(x))
	:: TY(x) == ACK -> printf("CHAIN-ACK(to %d, v%d)", F1(x), F2(x))
	:: TY(x) == VQ  -> printf("VER-QUERY(from %d, op %d)", F1(x), F2(x))
	:: TY(x) == VA  -> printf("VER-ANSWER(to %d, op %d, v%d)", F1(x), F2(x), F3(x))
	:: TY(x) == GR  -> printf("GET-REPLY(op %d, v%d, ok %d)", F1(x), F2(x), F3(x))
	:: TY(x) == PR  -> printf("PUT-REPLY(op %d att %d, v%d)", RIDOP(F1(x)), F1(x) % MAXATT, F2(x))
	:: TY(x) == ER && F2(x) == STALE -> printf("ERR(op %d att %d, stale-version)", RIDOP(F1(x)), F1(x) % MAXATT)
	:: TY(x) == ER && F2(x) == RETRY -> printf("ERR(op %d att %d, retry)", RIDOP(F1(x)), F1(x) % MAXATT)
	:: TY(x) == CP  -> printf("COPY(extra %d, v%d)", F1(x), F2(x))
	:: TY(x) == VT  -> printf("VSB(tail, v%d)", F1(x))
	:: TY(x) == VE  -> printf("VSB(extra %d, v%d)", F1(x), F2(x))
	:: TY(x) == DM  -> printf("DEMOTE(extra %d)", F1(x))
	:: else -> printf("?")
	fi
}

/* -DFAIL_HEAD: once H is spliced out, a read or an ack addressed to M
 * reaches M as the head (the head's variables); -DFAIL_MID: to a dead M,
 * dropped (deliver). */
#ifdef FAIL_HEAD
#define TOHEAD(x) if :: F1(x) == M && MGONE -> x = MK(TY(x), H, F2(x), F3(x), F4(x)) :: else fi
#else
#define TOHEAD(x) skip
#endif

/* a message is delivered */
inline deliver(msg) {
	printf("deliver "); pmsg(msg); printf("\n");
	if
	:: TY(msg) == GET -> TOHEAD(msg); node_get(msg)
	:: TY(msg) == PUT -> HEADPUT(msg)
	:: TY(msg) == CW  -> chain_write(msg)
	:: TY(msg) == ACK -> TOHEAD(msg); if :: F1(msg) == M && MGONE -> skip :: else -> chain_ack(msg) fi
	:: TY(msg) == VQ  -> tail_latest(); send(MK(VA, F1(msg), F2(msg), lt, 0))   /* (*shard).verQuery */
	:: TY(msg) == VA  -> ver_answer(msg)
	:: TY(msg) == GR  -> client_reply(msg)          /* DP: a get-reply completes nothing */
	:: TY(msg) == PR  -> REPLY_COMPLETE(F2(msg)); client_reply(msg)  /* DP: (*Directory).reply */
	:: TY(msg) == ER  -> client_reply(msg)
	:: TY(msg) == CP  -> copy_in(msg)
	:: TY(msg) == VT  -> complete(F1(msg))          /* DP: (*Directory).vsb, tail */
	:: TY(msg) == VE  -> dp_vsb_extra(F1(msg), F2(msg))
	:: TY(msg) == DM  -> demote_extra(msg)
	fi
}

/* a reply dropped after the data plane handled it */
inline dp_only(msg) {
	if
	:: TY(msg) == PR -> REPLY_COMPLETE(F2(msg))
	:: else
	fi
}

/* In the last promotion (all of them without -DEVICT) ver_done only grows
 * while the key is cached, so some
 * messages in flight can no longer change anything: a tail VSB or an extra's
 * VSB below ver_done, a put-reply below ver_done whose write is no longer
 * awaited. Removing them merges states that differ only in dead messages.
 * With FIX_MONO a copy older than the newest its extra ever held is ignored
 * wherever it arrives: dead too. And in the last promotion (no demote can
 * follow) a copy of the very version the extra holds only makes the extra
 * send its VSB again, which REANNOUNCE does at any time: removing it loses
 * only a second identical VSB in the bag (and overflow). These two merge the
 * many copies that the tail's and the head's announcements send, of no-op
 * versions too. */
#define FINAL (promos == PROMOS)
#define DEADPR(x) (F2(x) <= vdone && (cpc[(RIDOP(F1(x))-1)/OPS] != 2 || cop[(RIDOP(F1(x))-1)/OPS] != RIDOP(F1(x)) || catt[(RIDOP(F1(x))-1)/OPS] != F1(x) % MAXATT))
#ifdef FIX_MONO
#define DEADCP(x) (TY(x) == CP && (F2(x) < exmax[F1(x)] || (FINAL && F2(x)+1 == ex[F1(x)])))
#else
#define DEADCP(x) 0
#endif
/* a PUT with request id r can still reach the head: one is in flight, or
 * its client still waits on it and may time out and resend it */
#define RESENDABLE(r) (cpc[(RIDOP(r)-1)/OPS] == 2 && cop[(RIDOP(r)-1)/OPS] == RIDOP(r) && catt[(RIDOP(r)-1)/OPS] == (r) % MAXATT && FAULT(tmo, TMO))
inline gc() {
	/* the dedup entry of a request that can never reach the head again is
	 * never read again (nor, with FAIL_HEAD and GROUP, M's record of it,
	 * which a new head would take): states merge */
	k2 = 0;
	do
	:: k2 < NC*OPS*MAXATT ->
		if
		:: (dd[k2] != 0 || MDD(k2) != 0) && !RESENDABLE(k2) ->
			found = 0; j = 0;
			do
			:: j < NET -> if :: TY(net[j]) == PUT && RID(F1(net[j]), F2(net[j])) == k2 -> found = 1 :: else fi; j++
			:: else -> break
			od;
			if :: !found -> dd[k2] = 0; MDDCLR(k2) :: else fi
		:: else
		fi;
		k2++
	:: else -> break
	od;
#ifdef FAIL_HEAD
	/* M's request id of a version neither dirty nor its clean one is
	 * never read again (the splice adopts only those): states merge */
	k2 = 1;
	do
	:: k2 <= MAXV -> if :: !(mdirty & BIT(k2)) && k2 != mclean -> mrid[k2] = 0; MABCLR(k2) :: else fi; k2++
	:: else -> break
	od;
#endif
	k2 = 0;
	do
	:: k2 < NET ->
		if
		:: (cached && FINAL &&
		    ((TY(net[k2]) == VT && F1(net[k2]) <= vdone) ||
		     (TY(net[k2]) == VE && F2(net[k2]) < vdone) ||
		     (TY(net[k2]) == PR && DEADPR(net[k2])))) || DEADCP(net[k2]) -> rm(k2)
		:: else -> k2++
		fi
	:: else -> break
	od
}

/* Runs end (are cut) when the bag overflows: the channels are bounded.
 * Nothing can fail once every client has finished. */
#define DONE(c) (cn[c] >= OPS || KIND(c) == 0)     /* op PR_N: the client stops */
#define LIVE (!ovf && (!DONE(0) || !DONE(1)))

#define FIRST(i) (i == 0 || net[i] != net[i-1])   /* equal messages are neighbours */
#define SLOT(i) \
	:: d_step { LIVE && net[i] != 0 && FIRST(i) -> m = net[i]; rm(i); deliver(m); gc(); CLEAN } \
LOSEANY(i) \
	:: d_step { LIVE && net[i] != 0 && FIRST(i) && FAULT(lost, LOSS) && TY(net[i]) == PR -> lost++; m = net[i]; printf("lost after the DP: "); pmsg(m); printf("\n"); rm(i); dp_only(m); gc(); CLEAN } \
LOSEREPLY(i) \
	:: d_step { LIVE && net[i] != 0 && FIRST(i) && FAULT(dups, DUP) && (DUPTYPES & (1 << TY(net[i]))) -> dups++; m = net[i]; printf("duplicate:\n"); deliver(m); gc(); CLEAN }

/* -DGROUP: two writes admitted together at the head, a the first to arrive.
 * A write waiting for admission is, to everything but the group it joins, a
 * write still on its way (the bag delays any message), so the model has no
 * admission queue: a PUT is delivered alone (a group of one) or with any
 * other PUT in flight, as a group of two in either order. Groups have two
 * writes at most: the model's maxWriteGroup (two clients). The bag is
 * sorted and a PUT has the second lowest type (F5 is 0 but in a chain
 * write), so the PUTs in flight are neighbours; with at most four of them
 * (two clients, one timeout or duplicate, one retry after an ERR), any two
 * are at most three slots apart: only those pairs are steps (pan.c's size). */
#define GPAIR(a, b) \
	:: d_step { LIVE && TY(net[a]) == PUT && TY(net[b]) == PUT && FIRST(a) -> \
		m = net[a]; gm = net[b]; \
		if :: (a) > (b) -> rm(a); rm(b) :: else -> rm(b); rm(a) fi; \
		printf("the head admits a group: op %d att %d, then op %d att %d\n", F1(m), F2(m), F1(gm), F2(gm)); \
		e0 = 0; \
		do \
		:: e0 < 2 -> if :: e0 == 1 -> m = gm :: else fi; head_write(m); e0++ \
		:: else -> break \
		od; \
		group_apply(); gc(); CLEAN }

/* Loss of a message is its delay forever, which the bag already allows: for
 * P1-P3 a lost message changes the reachable states only by the slot it
 * takes. What loss adds is a reply lost after the data plane handled it (the
 * DP completes, the client never hears): that one is modelled. For P4, which
 * looks at states with nothing in flight, a put-reply or tail VSB that never
 * arrives is more too: -DLOSS_REPLY. With -DLOSS_ANY any message may be
 * dropped. */
#ifdef LOSS_REPLY
#define LOSEREPLY(i) :: d_step { LIVE && net[i] != 0 && FIRST(i) && FAULT(lost, LOSS) && (TY(net[i]) == PR || TY(net[i]) == VT) -> \
	lost++; printf("lost: "); pmsg(net[i]); printf("\n"); rm(i); CLEAN }
#else
#define LOSEREPLY(i)
#endif
#ifdef LOSS_ANY
#define LOSEANY(i) :: d_step { LIVE && net[i] != 0 && FIRST(i) && FAULT(lost, LOSS) -> lost++; printf("lost: "); pmsg(net[i]); printf("\n"); rm(i); CLEAN }
#else
#define LOSEANY(i)
#endif

/* A read's timeout resends it, maybe to another node; the result could be
 * no older than the first send's, so it adds nothing that a new read (with
 * a floor at least as high) does not: only with -DREAD_TMO. */
#ifdef READ_TMO
#define READTMO(c, n) :: d_step { LIVE && cpc[c] == 1 && FAULT(tmo, TMO) && CANREAD(n) -> \
		tmo++; send(MK(GET, n, cop[c], VFLAG(n), 0)); CLEAN }
#else
#define READTMO(c, n)
#endif

/* a client starts a read, or times out and sends it again */
#define READ(c, n) \
	:: d_step { LIVE && cpc[c] == 0 && cn[c] < OPS && (KIND(c) & PR_R) && CANREAD(n) -> \
		cop[c] = c*OPS + cn[c] + 1; cfloor[c] = maxobs; catt[c] = 0; cpc[c] = 1; \
		printf("client %d starts read op %d, DP routes it to node %d\n", c, cop[c], n); \
		send(MK(GET, n, cop[c], VFLAG(n), 0)); CLEAN } \
	READTMO(c, n)

/* a client starts a write, or times out and sends it again (same request id) */
#define WRITE(c) \
	:: d_step { LIVE && cpc[c] == 0 && cn[c] < OPS && (KIND(c) & PR_W) && wleft > 0 && CANWRITE -> \
		wleft--; cop[c] = c*OPS + cn[c] + 1; cfloor[c] = maxobs; catt[c] = 0; cpc[c] = 2; \
		printf("client %d starts write op %d\n", c, cop[c]); \
		dp_write(c); CLEAN } \
	:: d_step { LIVE && cpc[c] == 2 && FAULT(tmo, TMO) && CANWRITE -> \
		tmo++; printf("client %d times out, resends op %d att %d\n", c, cop[c], catt[c]); dp_write(c); CLEAN }

/* storagenode (*Node).reannounce: an extra re-sends the VSB of what it holds */
#define REANNOUNCE(e) \
	:: d_step { LIVE && ex[e] != 0 && NOTINBAG(MK(VE, e, ex[e]-1, 0, 0)) -> send(MK(VE, e, ex[e]-1, 0, 0)); CLEAN }

/* storagenode (*shard).housekeep: the head re-forwards a pending write */
#define RETRANSMIT(v) \
	:: d_step { LIVE && FAULT(retx, RETX) && (hpend & BIT(v)) && NOTINBAG(CWMSG(HSUCC, v, REFWD(v), prid[v], PAB(v))) -> retx++; printf("head retransmits v%d (promoted %d)\n", v, REFWD(v)); sendnew(CWMSG(HSUCC, v, REFWD(v), prid[v], PAB(v))); CLEAN }

/* controller (*Controller).promote / evict, as implemented: install the slot
 * in the data plane (ver 0: unknown), then Promote at the head; evict from
 * the data plane, then Demote at the head, which tells the extras. With
 * FIX_SEED the head is promoted first and the slot is seeded from the head's
 * latest version and the plane's stamp floor. */
inline dp_insert() {
	cached = 1; fresh = 0; sinc = cinc;
#ifdef FIX_SEED
	vnext = seed;
#ifndef MUT_NO_FLOOR
	max2(vnext, sfloor);
#endif
	vdone = vnext;
	seed = 0;               /* dead until the next promotion: states merge */
#else
	vnext = 0; vdone = 0;
#endif
	printf("controller: DP Insert ver_next %d ver_done %d\n", vnext, vdone)
}
#ifdef MUT_COPY_DIRTY
#define MUT_CD 1        /* copy the latest version, clean or dirty */
#else
#define MUT_CD 0
#endif
inline head_promote() {
	promoted = 1; hinc = cinc;
	latest(hdirty, hclean); seed = lt;
	printf("controller: Promote at head (clean %d, latest %d)\n", hclean, lt);
	if                              /* (*shard).promote: copy the clean version now */
	:: hdirty == 0 || MUT_CD ->
		if :: MUT_CD -> v0 = lt :: else -> v0 = hclean fi;
		e0 = 0;
		do
		:: e0 < NE -> send(MK(CP, e0, v0, 0, 0)); e0++
		:: else -> break
		od
	:: else                         /* ... or when the tail's ack comes back */
	fi
}

/* storagenode (*Node).SetLayout -> adoptDirty -> (*shard).resendPending:
 * on a new layout the head re-sends every pending write down its chain at
 * once (the member that held it may be gone). */
inline resend() {
#ifndef MUT_NO_RESEND
	j = 1;
	do
	:: j <= MAXV -> if :: hpend & BIT(j) -> sendnew(CWMSG(HSUCC, j, REFWD(j), prid[j], PAB(j))) :: else fi; j++
	:: else -> break
	od
#else
	skip
#endif
}

/* P4, progress at quiescence: once nothing is in flight, the data plane has
 * caught up with the tail (ver_done >= the tail's committed version) and no
 * stamp is pending (ver_next == ver_done: an extra's VSB is refused while
 * ver_next > ver_done), so extras can come back. Checked in the last
 * promotion, with the slot installed and the head promoted. */
#define QUIET (!ovf && net[0] == 0 && cached && promoted && FINAL && ctl == 2)

/* P5, no write refused or stuck for good (with the failures): once nothing
 * is in flight, the head has no pending write (each was re-sent down the
 * new chain), and the head is promoted only while its slot is reserved or
 * installed (a promoted head without a slot refuses every write). */
#if defined(FAIL_TAIL) || defined(SWLOSS) || defined(FAILOVER) || defined(FAIL_MID) || defined(FAIL_HEAD)
#define P5
#endif

active proctype world() {
end:
	do
#ifndef NO_P4
	:: atomic { QUIET && (vdone < TAILC || vnext != vdone) ->
		printf("quiescent: ver_next %d, ver_done %d, tail committed %d\n", vnext, vdone, TAILC);
		assert(vdone >= TAILC);
		assert(vnext == vdone) }
#endif
#ifdef P5
	:: atomic { !ovf && net[0] == 0 && (hpend != 0 || (ctl == 0 && promoted)) ->
		printf("quiescent: pending %d, promoted %d, controller step %d\n", hpend, promoted, ctl);
		assert(hpend == 0);
		assert(!(ctl == 0 && promoted)) }
#endif
	SLOT(0)
#if NET > 1
	SLOT(1)
#endif
#if NET > 2
	SLOT(2)
#endif
#if NET > 3
	SLOT(3)
#endif
#if NET > 4
	SLOT(4)
#endif
#if NET > 5
	SLOT(5)
#endif
#if NET > 6
	SLOT(6)
#endif
#if NET > 7
	SLOT(7)
#endif
	READ(0, M) READ(0, X)
	READ(1, M) READ(1, X)
#if defined(READ_TAIL) || defined(TAIL_SKIP)
	READ(0, T) READ(1, T)
#endif
#ifdef READ_HEAD
	READ(0, H) READ(1, H)
#endif
#if NE > 1
	READ(0, 4) READ(1, 4)
#endif
	WRITE(0) WRITE(1)
#ifdef GROUP
	/* the pairs of GPAIR */
#if NET > 1
	GPAIR(0, 1)
#endif
#if NET > 2
	GPAIR(0, 2)
#endif
#if NET > 3
	GPAIR(0, 3)
#endif
#if NET > 1
	GPAIR(1, 0)
#endif
#if NET > 2
	GPAIR(1, 2)
#endif
#if NET > 3
	GPAIR(1, 3)
#endif
#if NET > 4
	GPAIR(1, 4)
#endif
#if NET > 2
	GPAIR(2, 0)
#endif
#if NET > 2
	GPAIR(2, 1)
#endif
#if NET > 3
	GPAIR(2, 3)
#endif
#if NET > 4
	GPAIR(2, 4)
#endif
#if NET > 5
	GPAIR(2, 5)
#endif
#if NET > 3
	GPAIR(3, 0)
#endif
#if NET > 3
	GPAIR(3, 1)
#endif
#if NET > 3
	GPAIR(3, 2)
#endif
#if NET > 4
	GPAIR(3, 4)
#endif
#if NET > 5
	GPAIR(3, 5)
#endif
#if NET > 6
	GPAIR(3, 6)
#endif
#if NET > 4
	GPAIR(4, 1)
#endif
#if NET > 4
	GPAIR(4, 2)
#endif
#if NET > 4
	GPAIR(4, 3)
#endif
#if NET > 5
	GPAIR(4, 5)
#endif
#if NET > 6
	GPAIR(4, 6)
#endif
#if NET > 7
	GPAIR(4, 7)
#endif
#if NET > 5
	GPAIR(5, 2)
#endif
#if NET > 5
	GPAIR(5, 3)
#endif
#if NET > 5
	GPAIR(5, 4)
#endif
#if NET > 6
	GPAIR(5, 6)
#endif
#if NET > 7
	GPAIR(5, 7)
#endif
#if NET > 6
	GPAIR(6, 3)
#endif
#if NET > 6
	GPAIR(6, 4)
#endif
#if NET > 6
	GPAIR(6, 5)
#endif
#if NET > 7
	GPAIR(6, 7)
#endif
#if NET > 7
	GPAIR(7, 4)
#endif
#if NET > 7
	GPAIR(7, 5)
#endif
#if NET > 7
	GPAIR(7, 6)
#endif
#endif
	REANNOUNCE(0)
#if NE > 1
	REANNOUNCE(1)
#endif
	RETRANSMIT(1) RETRANSMIT(2) RETRANSMIT(3) RETRANSMIT(4)
#ifndef FIX_SEED
	:: d_step { LIVE && ctl == 0 && promos < PROMOS -> dp_insert(); ctl = 1; CLEAN }
	:: d_step { LIVE && ctl == 1 -> head_promote(); promos++; ctl = 2; CLEAN }
#else
	:: d_step { LIVE && ctl == 0 && promos < PROMOS -> head_promote(); ctl = 1; CLEAN }
	:: d_step { LIVE && ctl == 1 -> dp_insert(); promos++; ctl = 2; CLEAN }
#endif
#ifdef FAIL_TAIL
	/* controller reconfig.go SetLayout (layout.Without): T dies and is
	 * spliced out with epoch+1; M, now the tail, commits what reaches it. */
	:: d_step { LIVE && tst == 0 ->
		printf("T dies; spliced out: chain H M\n"); tst = 1; tclean = 0; resend(); CLEAN }
	/* layout.WithTail, storagenode dropDirty + catchUpAsTail: T restarts,
	 * drops its dirty versions (it has none here), catches up with OpSync
	 * from M, taking M's latest version, dirty included, as committed (a
	 * tail commits what its predecessor holds), and only then serves, as
	 * tail. Before the fix (flaw H) OpSync pulled M's clean version only:
	 * a version the dead tail had acknowledged, dirty at M, was behind T. */
#ifdef TAIL_SKIP
	/* flaw I: T restarts with the layout it was started with (epoch 1,
	 * where it is the tail), its data directory replaced (it keeps nothing,
	 * as above); recovery's catchUp pulls M's clean version, and M's
	 * answer carries epoch 2 (heardEpoch). Messages sent to T before it
	 * died are lost (a restart takes longer than a rack's delay). */
	:: d_step { LIVE && tst == 1 ->
		tclean = mclean; tst = 3;
		printf("T restarts with its first layout, caught up at v%d: chain H M at epoch 2\n", tclean); CLEAN }
	/* layout.WithTail: T is added back as tail (epoch 3) and takes it
	 * without having heard epoch 2: its chain is the same as in epoch 1.
	 * storagenode joins: a layout more than one epoch after the node's own
	 * makes it catch up with every chain it is in below the head (dropDirty
	 * + catchUpAsTail, as for a join). The mutant computes the joins from
	 * membership alone: T took itself for a member throughout. */
	:: d_step { LIVE && tst == 3 ->
#if defined(FIX_MISSED) && !defined(MUT_JOINS_BY_MEMBERSHIP)
#ifdef FIX_REJOIN
		latest(mdirty, mclean); tclean = lt;
#else
		tclean = mclean;
#endif
#endif
		printf("T takes epoch 3 (missed 2) as tail at v%d: chain H M T\n", tclean); tst = 2; resend(); CLEAN }
#else
	:: d_step { LIVE && tst == 1 ->
#ifndef MUT_SERVE_BEFORE_CATCHUP
#ifdef FIX_REJOIN
		latest(mdirty, mclean); tclean = lt;
#else
		tclean = mclean;
#endif
#endif
		printf("T rejoins as tail at v%d: chain H M T\n", tclean); tst = 2; resend(); CLEAN }
#endif
#endif
#ifdef FAIL_MID
	/* controller reconfig.go NodeDown (layout.Without): M dies and is
	 * spliced out with epoch+1 (chain H T); storagenode SetLayout ->
	 * adoptDirty -> resendPending: the head re-sends its pending writes to
	 * its new successor T, which acks them to H. */
	:: d_step { LIVE && mst == 0 ->
		printf("M dies; spliced out: chain H T\n"); mst = 1; mclean = 0; mdirty = 0; resend(); CLEAN }
#endif
#ifdef FAIL_HEAD
	/* controller NodeDown: H dies and is spliced out with epoch+1 (chain M
	 * T); not while a promotion is half done (ctl 1). storagenode
	 * adoptDirty -> (*shard).adopt at M, the new head: its dirty versions
	 * become pending writes and go down the chain, and their request ids
	 * (and its clean version's) enter the dedup table, so a client's retry
	 * is not applied again; H's dedup table is gone with it. If the key is
	 * hot, SetLayout -> Resync then promotes it at the new head (ctl 7) and
	 * re-installs the slot seeded from the head's latest version and the
	 * stamp floor (ctl 8). Gossip declares H dead a second or more after
	 * it stops, far longer than a rack's delay: no request sent to H is
	 * still in flight at the splice, nor H's refusals (NOPUTS: a request,
	 * a retry and the answer to either live across the failover only with
	 * a second's delay; a client's retry after it goes to M). */
#define NPUT(i) (NET <= i || (TY(net[i]) != PUT && TY(net[i]) != ER))
#define NOPUTS (NPUT(0) && NPUT(1) && NPUT(2) && NPUT(3) && NPUT(4) && NPUT(5) && NPUT(6) && NPUT(7))
	:: d_step { LIVE && mst == 0 && ctl != 1 && NOPUTS ->
		printf("H dies; spliced out: chain M T, M heads (clean %d, dirty %d)\n", mclean, mdirty);
		j = 0;
		do
#if defined(GROUP) && !defined(MUT_NO_ADOPT_DEDUP)
		:: j < NC*OPS*MAXATT -> dd[j] = mdd[j]; mdd[j] = 0; j++
#else
		:: j < NC*OPS*MAXATT -> dd[j] = 0; j++
#endif
		:: else -> break
		od;
		hclean = mclean; hdirty = mdirty; hpend = 0; promoted = 0;
		j = 0;
		do
		:: j <= MAXV ->
			prid[j] = 0; MABPEND(j, 0);
			if
			:: (mdirty & BIT(j)) || (j == mclean && j > 0) ->
#ifndef MUT_NO_ADOPT_DEDUP
#ifndef GROUP
				if :: mrid[j] != NORID -> dd[mrid[j]] = 1 << 4 | j :: else fi;
#endif
#endif
#ifndef MUT_NO_ADOPT_PENDING
				if :: mdirty & BIT(j) -> hpend = hpend | BIT(j); prid[j] = mrid[j]; MABPEND(j, mab[j]) :: else fi
#else
				skip
#endif
			:: else
			fi;
			mrid[j] = 0; MABCLR(j); j++
		:: else -> break
		od;
		/* ghosts: a write H applied that never reached M died with H,
		 * unacknowledged (an acknowledged one reached the tail through M);
		 * a retry may apply it anew */
#ifdef GROUP
		/* (with two writes, one below M's latest may never have reached
		 * it: mgot, the ops whose version reached M) */
		j = 1;
		do
		:: j <= MAXV ->
			if :: vop[j] != 0 && !mgot[vop[j]] -> applied[vop[j]] = 0; vop[j] = 0 :: else fi;
			if :: vab[j] != 0 && !mgot[vab[j]] -> applied[vab[j]] = 0; vab[j] = 0 :: else fi;
			j++
		:: else -> break
		od;
		j = 0;
		do
		:: j <= NC*OPS -> mgot[j] = 0; j++      /* dead from now on: states merge */
		:: else -> break
		od;
#else
		latest(mdirty, mclean);
		j = lt + 1;
		do
		:: j <= MAXV -> if :: vop[j] != 0 -> applied[vop[j]] = 0; vop[j] = 0 :: else fi; j++
		:: else -> break
		od;
#endif
		mclean = 0; mdirty = 0; mst = 1;
		/* what was on its way to the dead H (M's acks) or to M as a
		 * middle (H's chain writes) is lost with them; an ack addressed
		 * "H" from now on is T's to the new head */
		k2 = 0;
		do
		:: k2 < NET ->
			if
			:: (TY(net[k2]) == ACK && F1(net[k2]) == H) || (TY(net[k2]) == CW && F1(net[k2]) == M) -> rm(k2)
			:: else -> k2++
			fi
		:: else -> break
		od;
		if :: ctl == 2 -> ctl = 7 :: else fi;
		resend(); CLEAN }
	:: d_step { LIVE && ctl == 7 -> head_promote(); ctl = 8; CLEAN }
	:: d_step { LIVE && ctl == 8 -> dp_insert(); ctl = 2; CLEAN }
#endif
#ifdef SWLOSS
	/* the switch restarts, with writes it stamped maybe still in flight:
	 * its registers are lost, slot and stamp floors alike; controller
	 * Reprogram takes a new incarnation (FIX_INC), asks the head again (a
	 * promotion, in the new incarnation: its latest version), then
	 * installs the slot seeded with it, stamping the new incarnation. */
	:: d_step { LIVE && ctl == 2 && swl == 0 ->
		printf("switch restarts: directory state lost\n");
		cached = 0; vnext = 0; vdone = 0; fresh = 0; sfloor = 0; swl = 1; ctl = 4;
#ifdef FIX_INC
		cinc++;
#endif
		CLEAN }
	:: d_step { LIVE && ctl == 4 ->
#ifndef MUT_RESYNC_OLD_SEED
		head_promote();
#endif
		ctl = 5; CLEAN }
	:: d_step { LIVE && ctl == 5 -> dp_insert(); ctl = 2; CLEAN }
#endif
#ifdef FAILOVER
	/* controller raft.go/fsm.go: the leader dies after the head's
	 * promotion (reserved by command), before the slot's Insert. */
	:: d_step { LIVE && ctl == 1 && oldseed == 0 && !stale ->
		printf("controller leader dies with a reservation open\n");
		stale = 1; oldseed = seed + 1; ctl = 6; CLEAN }
	/* (*Controller).TakeOver: the new leader undoes the unfinished
	 * reservation at the head, then may promote again. */
	:: d_step { LIVE && ctl == 6 ->
#ifndef MUT_NO_TAKEOVER
		printf("new leader: Demote at head\n"); promoted = 0;
		e0 = 0;
		do
		:: e0 < NE -> send(MK(DM, e0, 0, 0, 0)); e0++
		:: else -> break
		od;
#endif
		ctl = 0; CLEAN }
	/* the old leader's Insert reaches the switch late: refused, since the
	 * new leader's election id is higher (a no-op step, not modelled)... */
#ifdef MUT_STALE_LEADER
	/* ... unless the switch still accepts the old election id */
	:: d_step { LIVE && stale ->
		printf("old leader's Insert accepted\n");
		cached = 1; fresh = 0; vnext = oldseed - 1; vdone = vnext; stale = 0; CLEAN }
#endif
#endif
#ifdef EVICT
	:: d_step { LIVE && ctl == 2 && promos < PROMOS ->   /* directory.(*Directory).Evict */
		printf("controller: DP Evict\n"); cached = 0; vnext = 0; vdone = 0; fresh = 0; ctl = 3; CLEAN }
	:: d_step { LIVE && ctl == 3 ->                      /* (*shard).demote at the head */
		printf("controller: Demote at head\n"); promoted = 0;
		e0 = 0;
		do
		:: e0 < NE -> send(MK(DM, e0, 0, 0, 0)); e0++
		:: else -> break
		od;
		ctl = 0; CLEAN }
#endif
	od
}
