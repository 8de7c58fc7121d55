//go:build ignore

// netdir's directory contract in the kernel: an XDP program on ingress and a
// TC (tcx) program on egress, sharing one set of maps and one core that
// re-implements directory.Process (package directory) decision for decision.
//
//   - TC egress, on a client host: requests (GET, PUT, DEL) addressed to the
//     service address are looked up in the directory and the partition table,
//     split by buckets and the fine score, stamped with the clock, and
//     rewritten to the chosen storage node (destination MAC, IP and UDP port,
//     with checksum updates).
//   - XDP ingress: replies teach the per-node load and EWMA latency,
//     complete writes (the reply rule) and count the tenant's dmClock
//     completions, which requests carry as δ and ρ (directory/qos.go); VSBs from allowlisted storage sources
//     set fresh bits (the VSB rule); node ops pass; malformed netdir packets
//     are dropped and counted by reason. In router mode (a host on the path
//     of every request and reply, as a ToR is) XDP also routes requests and
//     bounces them out with XDP_TX.
//
// Every loop is bounded (LocationLists hold at most 32 nodes), no lock is
// held across a helper call, and the only helpers on the packet path are map
// lookups, the clock and, on TC, the checksum helpers (which know whether
// the skb's checksum is offloaded).

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#ifndef offsetof
#define offsetof(t, f) __builtin_offsetof(t, f)
#endif

// fresh is read without the lock: a read races only with writes that the
// contract lets it miss (the bitmap changes atomically as a word).
#define READ_ONCE_FRESH(s) (*(volatile __u32 *)&(s)->fresh)

// The contract's sizes (package directory).
#define MAX_LOCS 32
#define MAX_CHAIN 8
#define BUCKETS 32
#define SKETCH_ROWS 4
#define SKETCH_COLS 1024
#define STAMP_FLOORS 16384 // directory.StampFloors
#define MAX_NODES 65536
#define QOS_TENANTS 256 // directory.QoSTenants: tenants by id mod 256
#define QOS_NODES 32    // directory.QoSNodes: nodes by id mod 32

// Ops (package wire).
#define OP_GET 0x01
#define OP_PUT 0x02
#define OP_DEL 0x03
#define OP_VSB 0x04
#define OP_GET_REPLY 0x81
#define OP_PUT_REPLY 0x82
#define OP_DEL_REPLY 0x83
#define OP_ERR 0xff

#define FLAG_STALE_OK 0x01
#define FLAG_STAMPED 0x02
#define FLAG_HIT 0x04
#define FLAG_RESERVATION 0x08 // a reply served in dmClock's reservation phase
#define FLAG_VERIFY 0x10      // a GET an extra serves only as the tail confirms
// Flags only data planes and nodes set: cleared on every routed request.
#define FLAGS_PLANE (FLAG_STAMPED | FLAG_HIT | FLAG_RESERVATION | FLAG_VERIFY)

#define CODE_OK 0
#define CODE_NOT_FOUND 1

#define ND_MAGIC 0x4E44
#define ND_VERSION 2
#define ND_HDR_LEN 64

// Verdicts (directory.Action).
enum nd_action {
	ACT_DROP = 0,
	ACT_FORWARD = 1,
	ACT_TO_CLIENT = 2,
	ACT_MULTICAST = 3,
	ACT_PASS = 4,
};

// Drop reasons: the same indices as directory.Reason.
enum nd_reason {
	R_NONE = 0,
	R_SHORT = 1,
	R_MAGIC = 2,
	R_VERSION = 3,
	R_UNKNOWN_OP = 4,
	R_NO_ROUTE = 5,
	R_VSB_PORT = 6,
	R_VSB_NOT_CACHED = 7,
	R_VSB_NOT_MEMBER = 8,
	R_VSB_PENDING = 9,
	R_VSB_VERSION = 10,
	R_MAX = 16,
};

// Modes and policies (directory.Mode, directory.Policy).
#define MODE_TOR 0
#define MODE_HOST 1
#define POLICY_NETDIR 0
#define POLICY_PEGASUS 1
#define POLICY_REPLICAS 2
#define POLICY_STATIC 3

// nd_config flags.
#define CFG_CLOCK 0x01       // use clock instead of bpf_ktime_get_ns (tests)
#define CFG_XDP_ROUTE 0x02   // router mode: XDP routes requests (XDP_TX)
#define CFG_CONSUME_VSB 0x04 // VSBs end at this host: XDP_DROP after applying

// The fixed netdir header (package wire), in network byte order. Every field
// is naturally aligned within the header.
struct nd_hdr {
	__be16 magic;
	__u8 version;
	__u8 op;
	__u8 flags;
	__u8 code;
	__be16 tenant;
	__be64 reqid;
	__u8 hash[16];
	__be64 stamp;
	__be16 node;
	__be16 load;
	__be32 epoch;
	__be64 ts;
	__be32 delta; // dmClock δ, stamped on requests
	__be32 rho;   // dmClock ρ
};

// nd_config is the agent's configuration, a global the loader sets.
struct nd_config {
	__u32 partition_bits;
	__u32 max_nodes;    // node ids at or above are not learnt
	__u8 mode;          // MODE_*
	__u8 policy;        // POLICY_*
	__u8 flags;         // CFG_*
	__u8 pad0;
	__be16 svc_port;    // the service port, network order
	__u16 pad1;
	__be32 svc_ip;      // the service address (TC routes requests to it); 0: any
	__u64 window;       // fine-score horizon, ns
	__u64 clock;        // test clock when CFG_CLOCK
	__u8 if_mac[6];     // source MAC of XDP_TX frames
	__u16 pad2;
};

// nd_part is one partition: its chain and bucket table (indices into chain).
struct nd_part {
	__u16 chain[MAX_CHAIN];
	__u8 r;
	__u8 pad[7];
	__u8 buckets[BUCKETS];
};

struct nd_key {
	__u8 hash[16];
};

// nd_slot is a directory entry. locs, n, r and idx are set at insertion and
// never change; fresh and the versions change under the lock.
struct nd_slot {
	struct bpf_spin_lock lock;
	__u32 fresh;
	__u64 ver_next;
	__u64 ver_done;
	__u32 idx; // index into slot_buckets and slot_hits
	__u8 n;
	__u8 r;
	__u16 inc; // the incarnation stamps carry above the version (wire.MakeStamp)
	__u16 locs[MAX_LOCS];
};

struct nd_buckets {
	__u8 b[BUCKETS];
};

// nd_node is what replies taught of a node.
struct nd_node {
	__u64 latency; // EWMA, ns; 0 until learnt
	__u16 load;
	__u16 pad[3];
};

// nd_addr is where a node lives: the rewrite of a forwarded request.
struct nd_addr {
	__u8 mac[6];
	__be16 port;
	__be32 ip;
	__u32 valid;
};

// nd_src is a UDP source (ip:port, network order): the allowlist's key.
struct nd_src {
	__be32 ip;
	__be16 port;
	__u16 pad;
};

// nd_counters are per CPU; the Go side sums them.
struct nd_counters {
	__u64 hits;
	__u64 misses;
	__u64 replies;
	__u64 vsbs;
	__u64 passed;
	__u64 switched;
	__u64 drops[R_MAX]; // by directory.Reason
	__u64 drop_total;
	__u64 no_addr;   // routed to a node with no address: dropped
	__u64 frag_fwd;  // non-first fragments of a routed request, rewritten
	__u64 frag_miss; // non-first fragments with no routed first fragment: dropped
	__u64 xdp_tx;    // requests routed on XDP (router mode)
	__u64 tc_fwd;    // requests routed on TC egress
};

struct nd_sketch {
	__u32 cell[SKETCH_ROWS * SKETCH_COLS];
};

// nd_floor is a stamp floor (directory.FloorIndex): the highest stamp this
// plane issued to any key of that index, kept across evictions, so that a
// key promoted again never stamps below a version it stamped before.
struct nd_floor {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 v;
};

// nd_qos is a tenant's dmClock completions, all and reservation-phase;
// 32 bits that wrap, as δ and ρ are modular differences. Incremented
// atomically: completions at every node add to it.
struct nd_qos {
	__u32 done;
	__u32 res;
};

// nd_qos_mark is a (tenant, node) mark (directory/qos.go): the tenant's
// totals less its completions at the node since its last request there.
// Under its lock a request reads the totals and swaps them in, and a
// completion at the node raises the totals and the mark together, so a
// completion at the node is never taken for one elsewhere.
struct nd_qos_mark {
	struct bpf_spin_lock lock;
	__u32 done;
	__u32 res;
};

// nd_frag_key names one IP datagram (RFC 791 reassembly key, less the
// protocol, which is UDP).
struct nd_frag_key {
	__be32 saddr;
	__be32 daddr;
	__be16 id;
	__u16 pad;
};

struct nd_frag_val {
	__u8 mac[6];
	__u16 pad;
	__be32 ip;
};

struct nd_config cfg = {};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << 16); // the loader sizes it to 1<<partition bits
	__type(key, __u32);
	__type(value, struct nd_part);
} parts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096); // directory capacity; the loader sizes it
	__uint(map_flags, BPF_F_NO_PREALLOC); // a deleted slot is freed after readers, never reused under them
	__type(key, struct nd_key);
	__type(value, struct nd_slot);
} dir SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct nd_buckets);
} slot_buckets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} slot_hits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_NODES);
	__type(key, __u32);
	__type(value, struct nd_node);
} nodes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_NODES);
	__type(key, __u32);
	__type(value, struct nd_addr);
} node_addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct nd_src);
	__type(value, __u32); // 1: a storage node's source
} sources SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nd_counters);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nd_sketch);
} sketch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STAMP_FLOORS);
	__type(key, __u32);
	__type(value, struct nd_floor);
} floors SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, QOS_TENANTS);
	__type(key, __u32);
	__type(value, struct nd_qos);
} qos_totals SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, QOS_TENANTS * QOS_NODES); // directory.QoSIndex
	__type(key, __u32);
	__type(value, struct nd_qos_mark);
} qos_marks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct nd_frag_key);
	__type(value, struct nd_frag_val);
} frags SEC(".maps");

// Everything the core needs about one packet.
struct nd_pkt {
	struct nd_hdr *h;
	struct nd_counters *c;
	__u64 now;
	__be32 saddr;
	__be16 sport;
	__u16 node; // the forward target
};

static __always_inline __u64 nd_now(void)
{
	if (cfg.flags & CFG_CLOCK)
		return cfg.clock;
	return bpf_ktime_get_ns();
}

static __always_inline int nd_drop(struct nd_pkt *p, __u32 reason)
{
	if (reason < R_MAX)
		p->c->drops[reason]++;
	p->c->drop_total++;
	return ACT_DROP;
}

static __always_inline __u32 chain_mask(__u8 r)
{
	return r >= 32 ? 0xffffffff : ((__u32)1 << r) - 1;
}

static __always_inline __u32 bit(__u32 i)
{
	return i < 32 ? (__u32)1 << i : 0;
}

static __always_inline struct nd_part *lookup_part(struct nd_hdr *h)
{
	__u32 bits = cfg.partition_bits;
	__u32 p = 0;
	if (bits > 0 && bits <= 32)
		p = bpf_ntohl(*(__be32 *)h->hash) >> (32 - bits);
	return bpf_map_lookup_elem(&parts, &p);
}

static __always_inline struct nd_slot *lookup_slot(struct nd_hdr *h)
{
	struct nd_key k;
	__builtin_memcpy(&k, h->hash, sizeof(k));
	return bpf_map_lookup_elem(&dir, &k);
}

// score is the fine score (HATS §4.3): Window/t − load, the requests a node
// can still finish in the window; an unlearnt node scores highest.
static __always_inline __s64 score(__u16 n)
{
	__u32 k = n;
	struct nd_node *st = bpf_map_lookup_elem(&nodes, &k);
	if (!st || st->latency == 0)
		return (__s64)1 << 62;
	return (__s64)(cfg.window / st->latency) - (__s64)st->load;
}

// finer keeps the first candidate unless the second scores strictly higher.
static __always_inline __u32 finer(struct nd_pkt *p, __u16 na, __u16 nb, __u32 a, __u32 b)
{
	if (a == b || score(na) >= score(nb))
		return a;
	p->c->switched++;
	return b;
}

static __always_inline __u16 node_load(__u16 n)
{
	__u32 k = n;
	struct nd_node *st = bpf_map_lookup_elem(&nodes, &k);
	return st ? st->load : 0;
}

struct peg_ctx {
	struct nd_slot *s;
	__u32 eligible;
	__u32 best;
	__u32 best_load;
};

// peg_step is one step of Pegasus's scan for the least-loaded eligible
// member (ties: the lowest index), run by bpf_loop.
static long peg_step(__u32 i, void *arg)
{
	struct peg_ctx *c = arg;
	struct nd_slot *s = c->s;
	if (i >= MAX_LOCS || i >= s->n)
		return 1;
	if (!(c->eligible & bit(i)))
		return 0;
	__u32 j = i;
	asm volatile("" : "+r"(j)); // keep the mask: the verifier needs it
	__u32 l = node_load(s->locs[j & (MAX_LOCS - 1)]);
	if (c->best == MAX_LOCS || l < c->best_load) {
		c->best = i;
		c->best_load = l;
	}
	return 0;
}

// pick_slot chooses a LocationList index among the eligible members; it
// returns MAX_LOCS when no candidate is eligible. Pegasus takes the
// least-loaded eligible member that holds a bucket: one the controller
// gives no weight (still filling its chain) serves none of the key's reads.
static __always_inline __u32 pick_slot(struct nd_pkt *p, struct nd_slot *s, __u32 eligible, __u64 reqid)
{
	__u32 idx = s->idx;
	struct nd_buckets *bk = bpf_map_lookup_elem(&slot_buckets, &idx);
	if (!bk)
		return MAX_LOCS;
	if (cfg.policy == POLICY_PEGASUS) {
		__u32 weighted = 0;
#pragma unroll
		for (int i = 0; i < BUCKETS; i++)
			weighted |= bit(bk->b[i] & (MAX_LOCS - 1));
		struct peg_ctx pc = {.s = s, .eligible = eligible & weighted, .best = MAX_LOCS};
		bpf_loop(MAX_LOCS, peg_step, &pc, 0);
		return pc.best;
	}
	__u32 a = bk->b[reqid & (BUCKETS - 1)];
	__u32 b = bk->b[(reqid >> 8) & (BUCKETS - 1)];
	int a_ok = a < s->n && (eligible & bit(a));
	int b_ok = b < s->n && (eligible & bit(b));
	if (a_ok && b_ok)
		return finer(p, s->locs[a & (MAX_LOCS - 1)], s->locs[b & (MAX_LOCS - 1)], a, b);
	if (a_ok)
		return a;
	if (b_ok) {
		p->c->switched++;
		return b;
	}
	return MAX_LOCS;
}

// pick_chain chooses a chain index by the partition's buckets.
static __always_inline __u32 pick_chain(struct nd_pkt *p, struct nd_part *pt, __u64 reqid)
{
	__u8 pol = cfg.policy;
	if (pol == POLICY_STATIC)
		return 0;
	__u32 a = pt->buckets[reqid & (BUCKETS - 1)] & (MAX_CHAIN - 1);
	if (pol == POLICY_REPLICAS || pol == POLICY_PEGASUS)
		return a;
	__u32 b = pt->buckets[(reqid >> 8) & (BUCKETS - 1)] & (MAX_CHAIN - 1);
	return finer(p, pt->chain[a], pt->chain[b], a, b);
}

// miss counts a routed miss in the count-min sketch.
static __always_inline void miss(struct nd_pkt *p)
{
	p->c->misses++;
	__u32 zero = 0;
	struct nd_sketch *sk = bpf_map_lookup_elem(&sketch, &zero);
	if (!sk)
		return;
	__u8 *h = p->h->hash;
#pragma unroll
	for (int r = 0; r < SKETCH_ROWS; r++) {
		__u32 col = (((__u32)h[4 + 2 * r] << 8) | h[5 + 2 * r]) & (SKETCH_COLS - 1);
		sk->cell[r * SKETCH_COLS + col]++;
	}
}

static __always_inline void count_hit(struct nd_pkt *p, struct nd_slot *s)
{
	__u32 idx = s->idx;
	__u64 *hits = bpf_map_lookup_elem(&slot_hits, &idx);
	if (hits)
		(*hits)++;
	p->c->hits++;
}

// forward rewrites the target node and the request timestamp.
static __always_inline int forward(struct nd_pkt *p, __u16 n)
{
	p->h->node = bpf_htons(n);
	p->h->ts = bpf_cpu_to_be64(p->now);
	p->node = n;
	return ACT_FORWARD;
}

static __always_inline int nd_get(struct nd_pkt *p)
{
	struct nd_hdr *h = p->h;
	__u64 reqid = bpf_be64_to_cpu(h->reqid);
	__u8 flags = h->flags & ~FLAGS_PLANE;
	struct nd_part *pt = lookup_part(h);
	struct nd_slot *s = 0;
	if (cfg.policy <= POLICY_PEGASUS)
		s = lookup_slot(h);
	if (s) {
		// Any member holding a bucket may serve, fresh or not (issue 18):
		// freshness says how, not where. One the plane cannot vouch for
		// serves only what the tail confirms (FLAG_VERIFY): a non-fresh
		// extra, or at a host agent, which does not see every write, any
		// extra on a linearizable read. A stale-ok read at a host agent
		// keeps to the fresh members.
		__u8 r = s->r;
		__u32 fresh = READ_ONCE_FRESH(s) | chain_mask(r);
		__u32 eligible = 0xffffffff, trusted = fresh;
		if (cfg.mode == MODE_HOST) {
			if (flags & FLAG_STALE_OK)
				eligible = fresh;
			else
				trusted = chain_mask(r);
		}
		__u32 i = pick_slot(p, s, eligible, reqid);
		if (i >= MAX_LOCS) {
			// No member may serve: the chain always may (CRAQ).
			__u32 b = pt ? pt->buckets[reqid & (BUCKETS - 1)] : 0;
			i = r ? b % r : 0;
		}
		if (!(trusted & bit(i)))
			flags |= FLAG_VERIFY;
		count_hit(p, s);
		h->flags = flags | FLAG_HIT;
		return forward(p, s->locs[i & (MAX_LOCS - 1)]);
	}
	if (!pt || pt->r == 0)
		return nd_drop(p, R_NO_ROUTE);
	miss(p);
	h->flags = flags;
	return forward(p, pt->chain[pick_chain(p, pt, reqid) & (MAX_CHAIN - 1)]);
}

static __always_inline int nd_write(struct nd_pkt *p)
{
	struct nd_hdr *h = p->h;
	__u8 flags = h->flags & ~FLAGS_PLANE;
	struct nd_slot *s = lookup_slot(h);
	if (s) {
		__u64 stamp = 0;
		__u32 mask = chain_mask(s->r);
		int tor = cfg.mode == MODE_TOR;
		count_hit(p, s);
		// A write is about to exist that extras do not hold.
		bpf_spin_lock(&s->lock);
		s->fresh = mask;
		if (tor) {
			s->ver_next++;
			stamp = s->ver_next;
		}
		__u64 inc = s->inc;
		bpf_spin_unlock(&s->lock);
		if (tor) {
			flags |= FLAG_STAMPED;
			// Raise the key's stamp floor (its own lock: a floor is
			// shared by every key of its index).
			__u32 fi = (((__u32)h->hash[14] << 8) | h->hash[15]) & (STAMP_FLOORS - 1);
			struct nd_floor *f = bpf_map_lookup_elem(&floors, &fi);
			if (f) {
				bpf_spin_lock(&f->lock);
				if (f->v < stamp)
					f->v = stamp;
				bpf_spin_unlock(&f->lock);
			}
		}
		// A host agent does not stamp: the head assigns the version. The
		// stamp carries the slot's incarnation above the version
		// (wire.MakeStamp; spec/README.md, flaw G).
		if (tor)
			stamp = inc << 48 | (stamp & ((1ULL << 48) - 1));
		h->stamp = bpf_cpu_to_be64(stamp);
		h->flags = flags | FLAG_HIT;
		return forward(p, s->locs[0]);
	}
	struct nd_part *pt = lookup_part(h);
	if (!pt || pt->r == 0)
		return nd_drop(p, R_NO_ROUTE);
	miss(p);
	h->flags = flags;
	h->stamp = 0; // only a data plane stamps; the head assigns the version
	return forward(p, pt->chain[0]);
}

// complete records that version v committed at the tail; call it locked.
#define COMPLETE(s, v, mask)                          \
	do {                                          \
		if ((v) > (s)->ver_done) {            \
			(s)->ver_done = (v);          \
			if ((s)->ver_next < (v))      \
				(s)->ver_next = (v);  \
			(s)->fresh = (mask);          \
		}                                     \
	} while (0)

// learn updates the replying node's load and EWMA latency (weight 0.5).
static __always_inline void learn(struct nd_pkt *p)
{
	struct nd_hdr *h = p->h;
	__u32 n = bpf_ntohs(h->node);
	if (n >= cfg.max_nodes)
		return;
	struct nd_node *st = bpf_map_lookup_elem(&nodes, &n);
	if (!st)
		return;
	st->load = bpf_ntohs(h->load);
	__u64 ts = bpf_be64_to_cpu(h->ts);
	if (ts == 0 || ts > p->now)
		return;
	__u64 sample = p->now - ts;
	__u64 lat = st->latency;
	if (lat == 0)
		lat = sample;
	else
		lat = (lat + sample) / 2;
	st->latency = lat ? lat : 1;
}

// qos_index is directory.QoSIndex: the (tenant, node) mark.
static __always_inline __u32 qos_index(__u16 tenant, __u16 n)
{
	return (__u32)(tenant % QOS_TENANTS) * QOS_NODES + n % QOS_NODES;
}

// qos_stamp writes the tenant's δ and ρ for node n into a request that
// leaves for n, and moves the tenant's mark at n (directory/qos.go).
static __always_inline void qos_stamp(struct nd_hdr *h, __u16 n)
{
	__u16 tenant = bpf_ntohs(h->tenant);
	__u32 t = tenant % QOS_TENANTS, i = qos_index(tenant, n);
	struct nd_qos *tot = bpf_map_lookup_elem(&qos_totals, &t);
	struct nd_qos_mark *m = bpf_map_lookup_elem(&qos_marks, &i);
	__u32 delta = 0, rho = 0;
	if (tot && m) {
		bpf_spin_lock(&m->lock);
		__u32 done = *(volatile __u32 *)&tot->done, res = *(volatile __u32 *)&tot->res;
		delta = done - m->done;
		rho = res - m->res;
		m->done = done;
		m->res = res;
		bpf_spin_unlock(&m->lock);
	}
	h->delta = bpf_htonl(delta);
	h->rho = bpf_htonl(rho);
}

// qos_scheduler is the node whose dmClock scheduled the request that reply h
// answers: a write's chain head (its partition's), though the tail replies;
// else the replying node.
static __always_inline __u16 qos_scheduler(struct nd_hdr *h, __u8 op)
{
	if (op == OP_PUT_REPLY || op == OP_DEL_REPLY) {
		struct nd_part *pt = lookup_part(h);
		if (pt && pt->r > 0)
			return pt->chain[0];
	}
	return bpf_ntohs(h->node);
}

// qos_complete counts a served reply (get, put or del reply, code ok or
// not-found) at the node that scheduled its request.
static __always_inline void qos_complete(struct nd_hdr *h, __u8 op)
{
	if (op == OP_ERR || (h->code != CODE_OK && h->code != CODE_NOT_FOUND))
		return;
	__u16 tenant = bpf_ntohs(h->tenant);
	__u32 t = tenant % QOS_TENANTS, i = qos_index(tenant, qos_scheduler(h, op));
	struct nd_qos *tot = bpf_map_lookup_elem(&qos_totals, &t);
	struct nd_qos_mark *m = bpf_map_lookup_elem(&qos_marks, &i);
	if (!tot || !m)
		return;
	int res = h->flags & FLAG_RESERVATION;
	bpf_spin_lock(&m->lock);
	__sync_fetch_and_add(&tot->done, 1);
	m->done++;
	if (res) {
		__sync_fetch_and_add(&tot->res, 1);
		m->res++;
	}
	bpf_spin_unlock(&m->lock);
}

static __always_inline int nd_reply(struct nd_pkt *p, __u8 op)
{
	struct nd_hdr *h = p->h;
	p->c->replies++;
	learn(p);
	qos_complete(h, op);
	if ((op == OP_PUT_REPLY || op == OP_DEL_REPLY) && h->code == 0) {
		struct nd_slot *s = lookup_slot(h);
		if (s) {
			__u64 v = bpf_be64_to_cpu(h->stamp);
			__u32 mask = chain_mask(s->r);
			bpf_spin_lock(&s->lock);
			COMPLETE(s, v, mask);
			bpf_spin_unlock(&s->lock);
		}
	}
	return ACT_TO_CLIENT;
}

// member returns the index of n in the LocationList, or MAX_LOCS.
static __always_inline __u32 member(struct nd_slot *s, __u16 n)
{
	__u32 cnt = s->n;
#pragma unroll
	for (__u32 i = 0; i < MAX_LOCS; i++) {
		if (i < cnt && s->locs[i] == n)
			return i;
	}
	return MAX_LOCS;
}

static __always_inline int nd_vsb(struct nd_pkt *p)
{
	struct nd_hdr *h = p->h;
	struct nd_src src = {.ip = p->saddr, .port = p->sport};
	__u32 *kind = bpf_map_lookup_elem(&sources, &src);
	if (!kind || *kind != 1)
		return nd_drop(p, R_VSB_PORT);
	struct nd_slot *s = lookup_slot(h);
	if (!s)
		return nd_drop(p, R_VSB_NOT_CACHED);
	__u32 i = member(s, bpf_ntohs(h->node));
	__u32 r = s->r;
	if (i >= MAX_LOCS || i + 1 < r)
		return nd_drop(p, R_VSB_NOT_MEMBER);
	__u64 v = bpf_be64_to_cpu(h->stamp);
	__u32 mask = chain_mask(r);
	__u32 reason = R_NONE;
	bpf_spin_lock(&s->lock);
	if (i + 1 == r) {
		COMPLETE(s, v, mask); // the tail announces a commit
	} else if (s->ver_next != s->ver_done) {
		reason = R_VSB_PENDING;
	} else if (v != s->ver_done) {
		reason = R_VSB_VERSION;
	} else {
		s->fresh |= bit(i);
	}
	bpf_spin_unlock(&s->lock);
	if (reason != R_NONE)
		return nd_drop(p, reason);
	p->c->vsbs++;
	return ACT_MULTICAST;
}

// nd_check applies the header checks in the contract's order; it returns a
// drop reason or R_NONE. len is the UDP payload length.
static __always_inline __u32 nd_check(struct nd_hdr *h, void *data_end, __u32 len)
{
	if (len < ND_HDR_LEN || (void *)(h + 1) > data_end)
		return R_SHORT;
	if (h->magic != bpf_htons(ND_MAGIC))
		return R_MAGIC;
	if (h->version != ND_VERSION)
		return R_VERSION;
	return R_NONE;
}

// payload_len is the netdir payload's length as the headers state it: the
// UDP length, cut to what the IP packet holds (a first fragment holds less
// than the datagram; bytes past the IP total length are link padding).
static __always_inline __u32 payload_len(struct iphdr *ip, __u32 ihl, struct udphdr *udp)
{
	__u32 ulen = bpf_ntohs(udp->len);
	__u32 tot = bpf_ntohs(ip->tot_len);
	if (tot < ihl + 8 || ulen < 8)
		return 0;
	__u32 in_ip = tot - ihl - 8;
	ulen -= 8;
	return ulen < in_ip ? ulen : in_ip;
}

static __always_inline int is_request(__u8 op)
{
	return op == OP_GET || op == OP_PUT || op == OP_DEL;
}

// nd_process dispatches a checked header by op: directory.Process.
static __always_inline int nd_process(struct nd_pkt *p)
{
	__u8 op = p->h->op;
	switch (op) {
	case OP_GET:
		return nd_get(p);
	case OP_PUT:
	case OP_DEL:
		return nd_write(p);
	case OP_GET_REPLY:
	case OP_PUT_REPLY:
	case OP_DEL_REPLY:
	case OP_ERR:
		return nd_reply(p, op);
	case OP_VSB:
		return nd_vsb(p);
	}
	if (op >= 0x20 && op <= 0x3f) { // node ops, including reserved ones
		p->c->passed++;
		return ACT_PASS;
	}
	return nd_drop(p, R_UNKNOWN_OP);
}

static __always_inline struct nd_counters *get_counters(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&counters, &zero);
}

static __always_inline __u16 csum_fold(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

// csum_update applies a one's-complement difference to a checksum field
// (RFC 1624: HC' = ~(~HC + diff)).
static __always_inline __u16 csum_update(__u16 check, __u32 diff)
{
	__u64 s = (__u16)~check;
	s += diff;
	return csum_fold(s);
}

// nd_words holds the header words a routed request may change (flags,
// stamp, node and load, timestamp, δ and ρ), as they were, for the checksum
// update.
struct nd_words {
	__u32 w4;  // flags, code, tenant
	__u32 w40; // node, load
	__u64 stamp;
	__u64 ts;
	__u32 delta;
	__u32 rho;
};

static __always_inline __u32 word_at(struct nd_hdr *h, int off)
{
	return *(__u32 *)((void *)h + off);
}

static __always_inline void save_words(struct nd_hdr *h, struct nd_words *w)
{
	w->w4 = word_at(h, 4);
	w->w40 = word_at(h, 40);
	w->stamp = h->stamp;
	w->ts = h->ts;
	w->delta = h->delta;
	w->rho = h->rho;
}

// csum_add32 adds ~old + new to a one's-complement accumulator: the
// difference of one 32-bit word, as bpf_csum_diff computes it.
static __always_inline __u64 csum_add32(__u64 s, __u32 old, __u32 new)
{
	return s + (__u32)~old + new;
}

static __always_inline __u32 csum_fold32(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffffffff) + (s >> 32);
	return (__u32)s;
}

// hdr_diff is the one's-complement difference the rewrite made to the
// header: no helper call, only the words that can change.
static __always_inline __u64 hdr_diff(struct nd_hdr *h, struct nd_words *w, __u64 s)
{
	__u64 stamp = h->stamp, ts = h->ts;
	s = csum_add32(s, w->w4, word_at(h, 4));
	s = csum_add32(s, w->w40, word_at(h, 40));
	s = csum_add32(s, (__u32)w->stamp, (__u32)stamp);
	s = csum_add32(s, (__u32)(w->stamp >> 32), (__u32)(stamp >> 32));
	s = csum_add32(s, (__u32)w->ts, (__u32)ts);
	s = csum_add32(s, (__u32)(w->ts >> 32), (__u32)(ts >> 32));
	s = csum_add32(s, w->delta, h->delta);
	s = csum_add32(s, w->rho, h->rho);
	return s;
}

// ---------------------------------------------------------------- XDP

SEC("xdp")
int netdir_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end || ip->version != 4 || ip->ihl < 5 || ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	if (ip->frag_off & bpf_htons(0x1fff))
		return XDP_PASS; // a later fragment: no UDP header, nothing to parse
	__u32 ihl = (ip->ihl & 0xf) * 4;
	struct udphdr *udp = (void *)ip + ihl;
	if ((void *)(udp + 1) > data_end)
		return XDP_PASS;
	struct nd_pkt p = {.saddr = ip->saddr, .sport = udp->source};
	__be16 svc = cfg.svc_port;
	if (udp->dest != svc && udp->source != svc) {
		struct nd_src src = {.ip = ip->saddr, .port = udp->source};
		if (!bpf_map_lookup_elem(&sources, &src))
			return XDP_PASS; // not netdir traffic
	}
	p.c = get_counters();
	if (!p.c)
		return XDP_PASS;
	struct nd_hdr *h = (void *)(udp + 1);
	__u32 reason = nd_check(h, data_end, payload_len(ip, ihl, udp));
	if (reason != R_NONE) {
		nd_drop(&p, reason);
		return XDP_DROP;
	}
	if (is_request(h->op) && !(cfg.flags & CFG_XDP_ROUTE))
		return XDP_PASS; // a request to a server on this host: not ours to route
	struct nd_words old;
	save_words(h, &old);
	p.h = h;
	p.now = nd_now();
	switch (nd_process(&p)) {
	case ACT_DROP:
		return XDP_DROP;
	case ACT_MULTICAST:
		return (cfg.flags & CFG_CONSUME_VSB) ? XDP_DROP : XDP_PASS;
	case ACT_FORWARD:
		break;
	default:
		return XDP_PASS;
	}
	__u32 k = p.node;
	struct nd_addr *a = bpf_map_lookup_elem(&node_addrs, &k);
	if (!a || !a->valid) {
		p.c->no_addr++;
		return XDP_DROP; // dropped: stamps no δ or ρ
	}
	qos_stamp(h, p.node);
	// The header, destination and port changed: fix both checksums.
	__u32 d_ip = csum_fold32(csum_add32(0, ip->daddr, a->ip));
	__u32 old_ports = *(__u32 *)udp;
	udp->dest = a->port;
	__u32 d_udp = csum_fold32(hdr_diff(h, &old, csum_add32(d_ip, old_ports, *(__u32 *)udp)));
	ip->daddr = a->ip;
	ip->check = csum_update(ip->check, d_ip);
	if (udp->check) {
		__u16 c = csum_update(udp->check, d_udp);
		udp->check = c ? c : 0xffff;
	}
	__builtin_memcpy(eth->h_source, cfg.if_mac, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, a->mac, ETH_ALEN);
	p.c->xdp_tx++;
	return XDP_TX;
}

// ---------------------------------------------------------------- TC

#define L2_LEN sizeof(struct ethhdr)
#define IP_CSUM_OFF (L2_LEN + offsetof(struct iphdr, check))

// tc_frag rewrites a later fragment of a datagram whose first fragment was
// routed, so that the node gets the whole datagram.
static __always_inline int tc_frag(struct __sk_buff *skb, struct ethhdr *eth, struct iphdr *ip)
{
	struct nd_frag_key fk = {.saddr = ip->saddr, .daddr = ip->daddr, .id = ip->id};
	struct nd_frag_val *fv = bpf_map_lookup_elem(&frags, &fk);
	struct nd_counters *c = get_counters();
	if (!fv) {
		if (c)
			c->frag_miss++;
		return TC_ACT_SHOT;
	}
	__be32 old = ip->daddr, new = fv->ip;
	__builtin_memcpy(eth->h_dest, fv->mac, ETH_ALEN);
	ip->daddr = new;
	if (c)
		c->frag_fwd++;
	bpf_l3_csum_replace(skb, IP_CSUM_OFF, old, new, 4);
	return TC_ACT_OK;
}

SEC("tc")
int netdir_tc(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end || ip->version != 4 || ip->ihl < 5 || ip->protocol != IPPROTO_UDP)
		return TC_ACT_OK;
	__be32 svc_ip = cfg.svc_ip;
	if (svc_ip && ip->daddr != svc_ip)
		return TC_ACT_OK;
	if (ip->frag_off & bpf_htons(0x1fff))
		return svc_ip ? tc_frag(skb, eth, ip) : TC_ACT_OK;
	__u32 ihl = (ip->ihl & 0xf) * 4;
	__u32 need = L2_LEN + ihl + sizeof(struct udphdr) + ND_HDR_LEN;
	if (data + need > data_end && skb->len >= need) {
		// The header lies beyond the linear part: pull it in.
		if (bpf_skb_pull_data(skb, need))
			return TC_ACT_OK;
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		eth = data;
		ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > data_end)
			return TC_ACT_OK;
	}
	struct udphdr *udp = (void *)ip + ihl;
	if ((void *)(udp + 1) > data_end || udp->dest != cfg.svc_port)
		return TC_ACT_OK;
	struct nd_pkt p = {.saddr = ip->saddr, .sport = udp->source};
	p.c = get_counters();
	if (!p.c)
		return TC_ACT_OK;
	struct nd_hdr *h = (void *)(udp + 1);
	__u32 reason = nd_check(h, data_end, payload_len(ip, ihl, udp));
	if (reason != R_NONE) {
		nd_drop(&p, reason);
		return TC_ACT_SHOT;
	}
	if (!is_request(h->op))
		return TC_ACT_OK; // replies, VSBs and node ops are XDP's or nobody's
	struct nd_words old;
	save_words(h, &old);
	p.h = h;
	p.now = nd_now();
	if (nd_process(&p) != ACT_FORWARD)
		return TC_ACT_SHOT;
	__u32 k = p.node;
	struct nd_addr *a = bpf_map_lookup_elem(&node_addrs, &k);
	if (!a || !a->valid) {
		p.c->no_addr++;
		return TC_ACT_SHOT; // dropped: stamps no δ or ρ
	}
	qos_stamp(h, p.node);
	__be32 old_ip = ip->daddr, new_ip = a->ip;
	__u32 old_ports = *(__u32 *)udp;
	udp->dest = a->port;
	// The header's and the port's difference: checksummed by the NIC when
	// the checksum is offloaded, so not a pseudo-header change.
	__u32 d_l4 = csum_fold32(hdr_diff(h, &old, csum_add32(0, old_ports, *(__u32 *)udp)));
	__u32 l4_csum_off = L2_LEN + ihl + offsetof(struct udphdr, check);
	if (ip->frag_off & bpf_htons(0x2000)) { // more fragments follow: route them alike
		struct nd_frag_key fk = {.saddr = ip->saddr, .daddr = old_ip, .id = ip->id};
		struct nd_frag_val fv = {.ip = new_ip};
		__builtin_memcpy(fv.mac, a->mac, ETH_ALEN);
		bpf_map_update_elem(&frags, &fk, &fv, BPF_ANY);
	}
	__builtin_memcpy(eth->h_dest, a->mac, ETH_ALEN);
	ip->daddr = new_ip;
	p.c->tc_fwd++;
	// The helpers know whether the UDP checksum is offloaded (then only the
	// pseudo header counts) or complete (then everything does).
	bpf_l3_csum_replace(skb, IP_CSUM_OFF, old_ip, new_ip, 4);
	bpf_l4_csum_replace(skb, l4_csum_off, old_ip, new_ip, BPF_F_PSEUDO_HDR | BPF_F_MARK_MANGLED_0 | 4);
	bpf_l4_csum_replace(skb, l4_csum_off, 0, d_l4, BPF_F_MARK_MANGLED_0);
	return TC_ACT_OK;
}
