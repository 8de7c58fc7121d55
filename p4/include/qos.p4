// netdir: global dmClock's δ and ρ (issue 17), v1model (BMv2). The TNA
// program has its own (p4/tna/qos.p4), written with RegisterActions.
//
// It reproduces directory/qos.go: per tenant (tenant id mod 256) the
// completions and the reservation-phase completions, and per (tenant, node
// id mod 32) a mark, so that a request forwarded to node n is stamped with
// δ = done − mark, the tenant's completions at other nodes since its last
// request to n (ρ likewise), and the mark is set to done. A completion at n
// raises done and n's mark alike; it is at the node that scheduled the
// request, the replying node for a get and the partition's chain head for a
// put or del (the pipeline puts it in meta.qos_node). 32-bit registers; the
// differences wrap.
//
// Registers:
//   qos_done, qos_res            index tenant mod 256
//   qos_done_mark, qos_res_mark  index (tenant mod 256) * 32 + node mod 32
//                                (directory.QoSIndex)
//
// request: a GET, PUT or DEL, whose tenant totals are read (meta.qos_done,
// meta.qos_res) whether or not it is stamped; stamp: a request forwarded to
// meta.target; complete: a completion (a get, put or del reply of code ok
// or not-found) charged to meta.qos_node.
#ifndef NETDIR_QOS_P4
#define NETDIR_QOS_P4

#include "headers.p4"

control Qos(inout headers_t hdr, inout local_meta_t meta, in bool request, in bool stamp, in bool complete) {
    register<bit<32>>(NETDIR_QOS_TENANTS) qos_done;
    register<bit<32>>(NETDIR_QOS_TENANTS) qos_res;
    register<bit<32>>(NETDIR_QOS_MARKS) qos_done_mark;
    register<bit<32>>(NETDIR_QOS_MARKS) qos_res_mark;

    apply {
        bit<32> t = (bit<32>)hdr.netdir.tenant[7:0];
        bit<5> n = meta.qos_node[4:0];
        if (stamp) {
            n = meta.target[4:0];
        }
        bit<32> i = (bit<32>)(hdr.netdir.tenant[7:0] ++ n);
        bit<32> mark;
        if (request) {
            qos_done.read(meta.qos_done, t);
            qos_res.read(meta.qos_res, t);
        } else if (complete) {
            qos_done.read(meta.qos_done, t);
            qos_done.write(t, meta.qos_done + 1);
            if (hdr.netdir.flags[3:3] == 1) { // reservation
                qos_res.read(meta.qos_res, t);
                qos_res.write(t, meta.qos_res + 1);
            }
        }
        if (stamp) {
            qos_done_mark.read(mark, i);
            hdr.netdir.delta = meta.qos_done - mark;
            qos_done_mark.write(i, meta.qos_done);
            qos_res_mark.read(mark, i);
            hdr.netdir.rho = meta.qos_res - mark;
            qos_res_mark.write(i, meta.qos_res);
        } else if (complete) {
            qos_done_mark.read(mark, i);
            qos_done_mark.write(i, mark + 1);
            if (hdr.netdir.flags[3:3] == 1) { // reservation
                qos_res_mark.read(mark, i);
                qos_res_mark.write(i, mark + 1);
            }
        }
    }
}

#endif
