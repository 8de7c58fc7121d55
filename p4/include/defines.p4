// netdir: constants and types shared by the v1model (BMv2) and TNA (Tofino)
// programs. Every number here mirrors a constant of the Go contract:
// wire/wire.go (header, ops, flags, codes) and directory/directory.go
// (sizes, drop reasons). Change them together.
#ifndef NETDIR_DEFINES_P4
#define NETDIR_DEFINES_P4

// ---- Capacities (see p4/README.md, "Resources") ----
#ifndef NETDIR_SLOTS
#define NETDIR_SLOTS 4096           // directory entries D (contract: >= 4096)
#endif
#ifndef NETDIR_PARTITIONS
#define NETDIR_PARTITIONS 1024      // partition table entries P (contract default 1024)
#endif
#define NETDIR_MAX_NODES 4096       // node ids below this are learnt (directory.Config.MaxNodes)
#define NETDIR_BUCKETS 32           // directory.Buckets
#define NETDIR_MAX_LOCS 32          // directory.MaxLocations
#define NETDIR_SKETCH_COLS 1024     // directory.SketchCols (4 rows, directory.SketchRows)
#ifndef NETDIR_SCORE_ENTRIES
#define NETDIR_SCORE_ENTRIES 4096   // fine-score ranges: 2*sqrt(Window) entries, Window <= ~4 ms
#endif
#define NETDIR_ROUTES 1024
#define NETDIR_L2 1024
#define NETDIR_PORTS 512
#define NETDIR_FLOOR_BITS 14        // directory.StampFloors = 1 << 14, indexed by directory.FloorIndex
#define NETDIR_FLOORS 16384         // stamp floors: 1 << NETDIR_FLOOR_BITS
#define NETDIR_QOS_TENANTS 256      // directory.QoSTenants: tenants by id mod 256
#define NETDIR_QOS_MARKS 8192       // directory.QoSTenants * directory.QoSNodes (32 nodes by id mod 32)

// Bucket-table runs (directory.Runs) per partition and per slot that the
// range tables hold on average: NETDIR_BUCKETS covers any table; weights from
// directory.BucketsForWeights need one per member with a share (a chain of 3:
// 3), so a target short of TCAM (Tofino) may build with a smaller -D.
#ifndef NETDIR_RUNS
#define NETDIR_RUNS NETDIR_BUCKETS
#endif
// Runs per partition (its chain's members: R), when they differ.
#ifndef NETDIR_PART_RUNS
#define NETDIR_PART_RUNS NETDIR_RUNS
#endif

// Table sizes derived from the capacities.
#define NETDIR_PART_BUCKETS (NETDIR_PARTITIONS * NETDIR_PART_RUNS)
#define NETDIR_SLOT_BUCKETS (NETDIR_SLOTS * NETDIR_RUNS)
#define NETDIR_SLOT_MEMBERS (NETDIR_SLOTS * NETDIR_MAX_LOCS)

// ---- Types ----
typedef bit<9>   port_t;        // v1model and TNA both use 9-bit ports
typedef bit<16>  node_t;        // wire.NodeID
typedef bit<16>  slot_t;        // directory slot index
typedef bit<20>  partition_t;   // up to 20 partition bits (directory.Config.PartitionBits)
typedef bit<5>   loc_t;         // LocationList index 0..31
typedef bit<3>   chain_idx_t;   // chain index 0..7
typedef bit<4>   chain_len_t;   // R: 1..8
typedef bit<6>   loc_len_t;     // N: 1..32
typedef bit<64>  version_t;     // VersionStamp
typedef bit<128> keyhash_t;     // wire.KeyHash

// ---- wire/ ----
const bit<16> NETDIR_UDP_PORT = 7420;   // wire.ServicePort
const bit<16> NETDIR_MAGIC    = 0x4E44; // wire.Magic
const bit<8>  NETDIR_VERSION  = 2;      // wire.Version

const bit<8> OP_GET       = 0x01;
const bit<8> OP_PUT       = 0x02;
const bit<8> OP_DEL       = 0x03;
const bit<8> OP_VSB       = 0x04;
const bit<8> OP_GET_REPLY = 0x81;
const bit<8> OP_PUT_REPLY = 0x82;
const bit<8> OP_DEL_REPLY = 0x83;
const bit<8> OP_ERR       = 0xff;
const bit<8> OP_NODE_MIN  = 0x20;       // OpChainWrite
const bit<8> OP_NODE_MASK = 0xe0;       // node ops 0x20..0x3f, the reserved ones too (wire.Op.IsNodeOp): op & mask == OP_NODE_MIN

// wire flags: 0x01 stale-ok (the client's; no data plane reads it), 0x02
// stamped, 0x04 hit, 0x08 reservation (on a reply: served in dmClock's
// reservation phase), 0x10 verify (a GET to an extra whose fresh bit is
// clear: the extra asks the tail for the committed version). The data plane
// writes them as the bit slice flags[4:1] = (verify, reservation, hit,
// stamped), which Tofino sets without computed masks; a request leaves with
// reservation cleared, and verify only where the pipeline sets it.
const bit<4> MARKS_NONE        = 0b0000;
const bit<4> MARKS_HIT         = 0b0010;
const bit<4> MARKS_STAMPED_HIT = 0b0011;
const bit<4> MARKS_VERIFY_HIT  = 0b1010;

const bit<8> CODE_OK        = 0;
const bit<8> CODE_NOT_FOUND = 1;

// ---- directory.Reason: the index of the `drops` counter ----
const bit<8> REASON_NONE           = 0;
const bit<8> REASON_SHORT          = 1;
const bit<8> REASON_MAGIC          = 2;
const bit<8> REASON_VERSION        = 3;
const bit<8> REASON_UNKNOWN_OP     = 4;
const bit<8> REASON_NO_ROUTE       = 5;
const bit<8> REASON_VSB_PORT       = 6;
const bit<8> REASON_VSB_NOT_CACHED = 7;
const bit<8> REASON_VSB_NOT_MEMBER = 8;
const bit<8> REASON_VSB_PENDING    = 9;
const bit<8> REASON_VSB_VERSION    = 10;
// P4-only reason, past the contract's list: a forward target with no
// node_addr entry (the controller did not install the node's address).
const bit<8> REASON_NO_NODE_ADDR   = 11;
// TNA only: a promotion's re-seed found the key promoted again between its
// two passes (p4/tna/coherence.p4); the packet is dropped, not mis-seeded.
const bit<8> REASON_RESEED_RACE    = 12;
#define NETDIR_NUM_REASONS 16

// ---- Index of the `events` counter (directory.Counters) ----
const bit<8> EVENT_HIT   = 0;
const bit<8> EVENT_MISS  = 1;
const bit<8> EVENT_REPLY = 2;
const bit<8> EVENT_VSB   = 3;
const bit<8> EVENT_PASS  = 4;
#define NETDIR_NUM_EVENTS 8
// directory.Counters.Switched is its own counter (`switched`, index 0): a
// GET can be a hit and a switch, and Tofino counts each counter once.

// ---- The packet replication engine group that receives accepted VSBs ----
const bit<16> VSB_MCAST_GROUP = 1;

// ---- Op classes (metadata) ----
// 0, the metadata's initial value: not netdir, or a packet dropped before
// its class is known (short, magic, version, unknown op).
const bit<3> CLASS_OTHER   = 0;
const bit<3> CLASS_GET     = 1;
const bit<3> CLASS_WRITE   = 2; // PUT, DEL
const bit<3> CLASS_REPLY   = 3; // GET reply, ERR
const bit<3> CLASS_WREPLY  = 4; // PUT reply, DEL reply
const bit<3> CLASS_VSB     = 5;
const bit<3> CLASS_NODE_OP = 6; // passed unchanged

// ---- Outcome of the netdir pipeline (directory.Action) ----
const bit<3> OUT_DROP      = 0;
const bit<3> OUT_FORWARD   = 1;
const bit<3> OUT_TO_CLIENT = 2;
const bit<3> OUT_MULTICAST = 3;
const bit<3> OUT_PASS      = 4;
const bit<3> OUT_L2L3      = 5; // not netdir traffic

// ---- The candidate an unlearnt latency picks (fine_score.p4's score_pick; 0: the score) ----
const bit<2> PICK_A    = 1;
const bit<2> PICK_B    = 2;

// ---- A VSB sender's place in the LocationList (vsb_filter.vsb_roles) ----
const bit<2> VSB_ROLE_CHAIN = 0; // before the tail: not a sender of VSBs
const bit<2> VSB_ROLE_TAIL  = 1; // the tail announces a commit
const bit<2> VSB_ROLE_EXTRA = 2; // an extra copy

// ---- Coherence commands (one per packet; 0, the initial value: none) ----
const bit<3> COH_READ     = 1; // GET hit: read the fresh bitmap
const bit<3> COH_STAMP    = 2; // PUT/DEL hit: ver_next += 1, fresh = chain
const bit<3> COH_COMPLETE = 3; // write reply or tail VSB: complete(v)
const bit<3> COH_VSB      = 5; // a member's VSB: COH_COMPLETE from the tail, COH_EXTRA from an extra

#endif
