// netdir: global dmClock's δ and ρ on Tofino (TNA); the same state and rule
// as the v1model control (p4/include/qos.p4) and directory/qos.go.
//
// Each register is accessed once per packet by one RegisterAction: a request
// reads qos_done[t] and qos_res[t] and swaps the (t, n) marks for them, the
// swap returning done − old mark, which is δ (ρ likewise); a completion increments
// all four (the res pair only when the reply is flagged reservation). The
// register index is the tenant's low 8 bits, and for the marks those
// followed by the low 5 bits of meta.qos_node (directory.QoSIndex): a
// request's target, or the node that scheduled a completion's request (a
// put or del reply's partition head, a get reply's sender).
#ifndef NETDIR_TNA_QOS_P4
#define NETDIR_TNA_QOS_P4

control Qos(inout headers_t hdr, inout local_meta_t meta, in bool request, in bool stamp, in bool complete) {
    // The marks' index, tenant[7:0] ++ node[4:0], through the hash unit
    // (identity), as Tofino computes register indices.
    Hash<bit<13>>(HashAlgorithm_t.IDENTITY) mark_index;
    Hash<bit<13>>(HashAlgorithm_t.IDENTITY) stamp_index;
    Register<bit<32>, bit<8>>(NETDIR_QOS_TENANTS, 0) qos_done;
    Register<bit<32>, bit<8>>(NETDIR_QOS_TENANTS, 0) qos_res;
    Register<bit<32>, bit<13>>(NETDIR_QOS_MARKS, 0) qos_done_mark;
    Register<bit<32>, bit<13>>(NETDIR_QOS_MARKS, 0) qos_res_mark;

    RegisterAction<bit<32>, bit<8>, bit<32>>(qos_done) done_read = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value;
        }
    };
    RegisterAction<bit<32>, bit<8>, bit<32>>(qos_done) done_count = {
        void apply(inout bit<32> value) {
            value = value + 1;
        }
    };
    RegisterAction<bit<32>, bit<8>, bit<32>>(qos_res) res_read = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value;
        }
    };
    RegisterAction<bit<32>, bit<8>, bit<32>>(qos_res) res_count = {
        void apply(inout bit<32> value) {
            value = value + 1;
        }
    };
    RegisterAction<bit<32>, bit<13>, bit<32>>(qos_done_mark) done_mark_swap = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = meta.qos_done - value;
            value = meta.qos_done;
        }
    };
    RegisterAction<bit<32>, bit<13>, bit<32>>(qos_done_mark) done_mark_count = {
        void apply(inout bit<32> value) {
            value = value + 1;
        }
    };
    RegisterAction<bit<32>, bit<13>, bit<32>>(qos_res_mark) res_mark_swap = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = meta.qos_res - value;
            value = meta.qos_res;
        }
    };
    RegisterAction<bit<32>, bit<13>, bit<32>>(qos_res_mark) res_mark_count = {
        void apply(inout bit<32> value) {
            value = value + 1;
        }
    };

    apply {
        bit<8> t = hdr.netdir.tenant[7:0];
        // A request's mark is its target's, a completion's its scheduler's:
        // two indices, so that neither waits for the other's field.
        bit<13> i = mark_index.get({t, meta.qos_node[4:0]});
        bit<13> i_stamp = stamp_index.get({t, meta.target[4:0]});
        // The totals depend on the class alone, the marks on the verdict:
        // the totals' stage comes early, the marks' last.
        if (request) {
            meta.qos_done = done_read.execute(t);
            meta.qos_res = res_read.execute(t);
        } else if (complete) {
            done_count.execute(t);
            if (hdr.netdir.flags[3:3] == 1) { // reservation
                res_count.execute(t);
            }
        }
        if (stamp) {
            hdr.netdir.delta = done_mark_swap.execute(i_stamp);
            hdr.netdir.rho = res_mark_swap.execute(i_stamp);
        } else if (complete) {
            done_mark_count.execute(i);
            if (hdr.netdir.flags[3:3] == 1) { // reservation
                res_mark_count.execute(i);
            }
        }
    }
}

#endif
