// netdir: the data-plane clock on BMv2, in ns. By default it is the switch's
// ingress timestamp (microseconds since start) times 1000. The keyless table
// `clock` lets a test pin it: its default action set to fixed_clock(now)
// makes every packet see `now`, which is how the vector suite's injected
// clock ("clock" feature) reaches BMv2. Production controllers leave the
// default (switch_clock). The TNA program uses the MAC timestamp instead.
#ifndef NETDIR_CLOCK_P4
#define NETDIR_CLOCK_P4

control Clock(inout local_meta_t meta, in bit<48> ingress_global_timestamp) {
    action switch_clock() {
        meta.now = (bit<64>)ingress_global_timestamp * 1000;
    }

    action fixed_clock(bit<64> now) {
        meta.now = now;
    }

    table clock {
        key = {}
        actions = {
            switch_clock;
            fixed_clock;
        }
        default_action = switch_clock();
        size = 1;
    }

    apply {
        clock.apply();
    }
}

#endif
