// netdir: the partition table, which covers every key. The partition is the
// top PartitionBits of the KeyHash (wire.KeyHash.Partition: the first 4 bytes
// big-endian, shifted right by 32 - bits); an LPM on those 32 bits realises
// any PartitionBits in one table: partition p of b bits is the prefix
// p << (32 - b) of length b. (32 bits, not 20: PI checks an LPM value's
// trailing zeros against the byte-padded width, so a 20-bit LPM key would
// refuse valid prefixes.) The action gives the partition id, the chain
// length R and the chain head. A write reply needs only the head (dmClock
// charges its completion there, qos.p4).
//
// Each partition's split weights are a bucket table of 32 entries, each a
// chain index, installed as one entry per run of equal buckets
// (directory.Runs): (partition, bucket range) -> (index, node), at most R
// for weights from directory.BucketsForWeights. The first candidate's bucket is reqid & 31, the second's (reqid >> 8)
// & 31 (package wire). There are two copies of the bucket table, buckets_a and
// buckets_b, with the same entries: a table is applied once per packet.
#ifndef NETDIR_PARTITION_P4
#define NETDIR_PARTITION_P4

#include "headers.p4"

control Partition(in headers_t hdr, inout local_meta_t meta) {
    action set_partition(partition_t id, chain_len_t r, node_t head) {
        meta.part_hit = true;
        meta.partition = id;
        meta.part_r = r;
        meta.part_head = head;
    }

    action no_route() {
        meta.part_hit = false;
    }

    table partitions {
        key = {
            hdr.netdir.keyhash[127:96]: lpm @name("hash_top32");
        }
        actions = {
            set_partition;
            @defaultonly no_route;
        }
        const default_action = no_route();
        size = NETDIR_PARTITIONS;
    }

    action set_chain_a(chain_idx_t index, node_t node) {
        meta.pa_idx = index;
        meta.pa_node = node;
    }

    action head_a() {
        meta.pa_idx = 0;
        meta.pa_node = meta.part_head;
    }

    table buckets_a {
        key = {
            meta.partition: exact @name("partition");
            hdr.netdir.reqid[4:0]: range @name("bucket");
        }
        actions = {
            set_chain_a;
            @defaultonly head_a;
        }
        const default_action = head_a();
        size = NETDIR_PART_BUCKETS;
    }

    action set_chain_b(chain_idx_t index, node_t node) {
        meta.pb_idx = index;
        meta.pb_node = node;
    }

    action head_b() {
        meta.pb_idx = 0;
        meta.pb_node = meta.part_head;
    }

    table buckets_b {
        key = {
            meta.partition: exact @name("partition");
            hdr.netdir.reqid[12:8]: range @name("bucket");
        }
        actions = {
            set_chain_b;
            @defaultonly head_b;
        }
        const default_action = head_b();
        size = NETDIR_PART_BUCKETS;
    }

    // The buckets in no branch (as Directory's chain_masks): they are read
    // for every packet, and only a GET that has its partition uses them.
    apply {
        partitions.apply();
        buckets_a.apply();
        buckets_b.apply();
    }
}

#endif
