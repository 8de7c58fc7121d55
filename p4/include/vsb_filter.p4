// netdir: VSB admission. A version-stamp broadcast is accepted only if it
// entered on a storage node's port (storage_ports, exact on the ingress
// port; the controller installs one entry per storage-facing port) and its
// sender is in the key's LocationList (members, exact (slot, node) -> the
// node's LocationList index). The version rules are in coherence.p4.
#ifndef NETDIR_VSB_FILTER_P4
#define NETDIR_VSB_FILTER_P4

#include "headers.p4"

control VsbFilter(in headers_t hdr, inout local_meta_t meta, in port_t ingress_port) {
    action storage_port() {
        meta.from_storage = true;
    }

    table storage_ports {
        key = {
            ingress_port: exact @name("ingress_port");
        }
        actions = {
            storage_port;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = NETDIR_PORTS;
    }

    action member(loc_t index) {
        meta.vsb_member = true;
        meta.vsb_idx = index;
    }

    action not_member() {
        meta.vsb_member = false;
        meta.vsb_idx = 0;
    }

    table members {
        key = {
            meta.slot: exact @name("slot");
            hdr.netdir.node: exact @name("node");
        }
        actions = {
            member;
            @defaultonly not_member;
        }
        const default_action = not_member();
        size = NETDIR_SLOT_MEMBERS;
    }

    action set_vsb_bit(bit<32> b) {
        meta.vsb_bit = b;
    }

    @hidden
    table vsb_bits {
        key = {
            meta.vsb_idx: exact;
        }
        actions = {
            set_vsb_bit;
        }
        const default_action = set_vsb_bit(0);
        const entries = {
            0: set_vsb_bit(32w0x1);
            1: set_vsb_bit(32w0x2);
            2: set_vsb_bit(32w0x4);
            3: set_vsb_bit(32w0x8);
            4: set_vsb_bit(32w0x10);
            5: set_vsb_bit(32w0x20);
            6: set_vsb_bit(32w0x40);
            7: set_vsb_bit(32w0x80);
            8: set_vsb_bit(32w0x100);
            9: set_vsb_bit(32w0x200);
            10: set_vsb_bit(32w0x400);
            11: set_vsb_bit(32w0x800);
            12: set_vsb_bit(32w0x1000);
            13: set_vsb_bit(32w0x2000);
            14: set_vsb_bit(32w0x4000);
            15: set_vsb_bit(32w0x8000);
            16: set_vsb_bit(32w0x10000);
            17: set_vsb_bit(32w0x20000);
            18: set_vsb_bit(32w0x40000);
            19: set_vsb_bit(32w0x80000);
            20: set_vsb_bit(32w0x100000);
            21: set_vsb_bit(32w0x200000);
            22: set_vsb_bit(32w0x400000);
            23: set_vsb_bit(32w0x800000);
            24: set_vsb_bit(32w0x1000000);
            25: set_vsb_bit(32w0x2000000);
            26: set_vsb_bit(32w0x4000000);
            27: set_vsb_bit(32w0x8000000);
            28: set_vsb_bit(32w0x10000000);
            29: set_vsb_bit(32w0x20000000);
            30: set_vsb_bit(32w0x40000000);
            31: set_vsb_bit(32w0x80000000);
        }
    }

    // The sender's role from its index and the chain length R (tail = R -
    // 1; R = 0 wraps to 31, as loc_t arithmetic does): Tofino's gateways
    // cannot compare two run-time values, a range table can.
    action set_vsb_role(bit<2> role) {
        meta.vsb_role = role;
    }

    @hidden
    table vsb_roles {
        key = {
            meta.slot_r: exact;
            meta.vsb_idx: range;
        }
        actions = {
            set_vsb_role;
        }
        const default_action = set_vsb_role(VSB_ROLE_CHAIN);
        const entries = {
            (0, 0 .. 30): set_vsb_role(VSB_ROLE_CHAIN);
            (0, 31 .. 31): set_vsb_role(VSB_ROLE_TAIL);
            (1, 0 .. 0): set_vsb_role(VSB_ROLE_TAIL);
            (1, 1 .. 31): set_vsb_role(VSB_ROLE_EXTRA);
            (2, 0 .. 0): set_vsb_role(VSB_ROLE_CHAIN);
            (2, 1 .. 1): set_vsb_role(VSB_ROLE_TAIL);
            (2, 2 .. 31): set_vsb_role(VSB_ROLE_EXTRA);
            (3, 0 .. 1): set_vsb_role(VSB_ROLE_CHAIN);
            (3, 2 .. 2): set_vsb_role(VSB_ROLE_TAIL);
            (3, 3 .. 31): set_vsb_role(VSB_ROLE_EXTRA);
            (4, 0 .. 2): set_vsb_role(VSB_ROLE_CHAIN);
            (4, 3 .. 3): set_vsb_role(VSB_ROLE_TAIL);
            (4, 4 .. 31): set_vsb_role(VSB_ROLE_EXTRA);
            (5, 0 .. 3): set_vsb_role(VSB_ROLE_CHAIN);
            (5, 4 .. 4): set_vsb_role(VSB_ROLE_TAIL);
            (5, 5 .. 31): set_vsb_role(VSB_ROLE_EXTRA);
            (6, 0 .. 4): set_vsb_role(VSB_ROLE_CHAIN);
            (6, 5 .. 5): set_vsb_role(VSB_ROLE_TAIL);
            (6, 6 .. 31): set_vsb_role(VSB_ROLE_EXTRA);
            (7, 0 .. 5): set_vsb_role(VSB_ROLE_CHAIN);
            (7, 6 .. 6): set_vsb_role(VSB_ROLE_TAIL);
            (7, 7 .. 31): set_vsb_role(VSB_ROLE_EXTRA);
            (8, 0 .. 6): set_vsb_role(VSB_ROLE_CHAIN);
            (8, 7 .. 7): set_vsb_role(VSB_ROLE_TAIL);
            (8, 8 .. 31): set_vsb_role(VSB_ROLE_EXTRA);
            (9, 0 .. 7): set_vsb_role(VSB_ROLE_CHAIN);
            (9, 8 .. 8): set_vsb_role(VSB_ROLE_TAIL);
            (9, 9 .. 31): set_vsb_role(VSB_ROLE_EXTRA);
            (10, 0 .. 8): set_vsb_role(VSB_ROLE_CHAIN);
            (10, 9 .. 9): set_vsb_role(VSB_ROLE_TAIL);
            (10, 10 .. 31): set_vsb_role(VSB_ROLE_EXTRA);
            (11, 0 .. 9): set_vsb_role(VSB_ROLE_CHAIN);
            (11, 10 .. 10): set_vsb_role(VSB_ROLE_TAIL);
            (11, 11 .. 31): set_vsb_role(VSB_ROLE_EXTRA);
            (12, 0 .. 10): set_vsb_role(VSB_ROLE_CHAIN);
            (12, 11 .. 11): set_vsb_role(VSB_ROLE_TAIL);
            (12, 12 .. 31): set_vsb_role(VSB_ROLE_EXTRA);
            (13, 0 .. 11): set_vsb_role(VSB_ROLE_CHAIN);
            (13, 12 .. 12): set_vsb_role(VSB_ROLE_TAIL);
            (13, 13 .. 31): set_vsb_role(VSB_ROLE_EXTRA);
            (14, 0 .. 12): set_vsb_role(VSB_ROLE_CHAIN);
            (14, 13 .. 13): set_vsb_role(VSB_ROLE_TAIL);
            (14, 14 .. 31): set_vsb_role(VSB_ROLE_EXTRA);
            (15, 0 .. 13): set_vsb_role(VSB_ROLE_CHAIN);
            (15, 14 .. 14): set_vsb_role(VSB_ROLE_TAIL);
            (15, 15 .. 31): set_vsb_role(VSB_ROLE_EXTRA);
        }
    }

    // Every table for every netdir packet, in no branch (as Directory's
    // chain_masks): only a VSB's command reads what they find, and only a
    // hit's (p4/include/pipeline.p4's commands).
    apply {
        storage_ports.apply();
        members.apply();
        vsb_bits.apply();
        vsb_roles.apply();
    }
}

#endif
