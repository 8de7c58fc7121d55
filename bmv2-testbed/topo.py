#!/usr/bin/python3
"""netdir BMv2 testbed: a Mininet topology around one simple_switch_grpc.

    data network 10.0.0.0/16 (through the P4 switch s1)
      storage hosts    n1..nN  10.0.1.i   switch ports 1..N
      client hosts     c1..cK  10.0.2.j   switch ports 101..100+K
      controller host  ctl     10.0.3.1   switch port 200
      service address          10.0.0.254:7420 (the directory; no host owns it)
    management network 10.100.0.0/24 (a kernel bridge m0, not through s1)
      storage host i  10.100.0.i, client j  10.100.0.(100+j), ctl 10.100.0.200
      switch s1       10.100.0.254 (P4Runtime :9559, Thrift :9090)

Every host and the switch live in namespaces of their own; the root
namespace only holds the bridge, with no address. The controller reaches the
switch over the management network and the storage nodes over the data
network, through s1, as node operations do in production; nodes report to
it and gossip over the management network.

The switch runs p4/build/netdir.json; the netdir controller pushes it again
with the P4Info over P4Runtime and installs partitions, node addresses, the
static routes to hosts (routes_v4 /32 entries, from the plan written here)
and the VSB group (the client ports: agents sit on client hosts). There is
no ARP through the switch: every host gets static ARP entries (the service
address resolves to the switch's MAC).

Run it as root through run.sh, which starts the netdir processes; this file
only builds the network. Uses Debian's `mininet` package (Python 3 API).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from mininet.cli import CLI
from mininet.log import info, setLogLevel
from mininet.net import Mininet
from mininet.node import Switch

SERVICE_IP = "10.0.0.254"
SERVICE_PORT = 7420
SWITCH_MAC = "02:4e:44:ff:ff:fe"
SWITCH_MGMT = "10.100.0.254"
MGMT_PORT = 0  # s1-eth0: the switch's management interface, not a BMv2 port


class Kind:
    """A role in the topology: its hosts' names, addresses and switch ports."""

    def __init__(self, prefix, subnet, port_base, mgmt_base, mac_byte, numbered=True):
        self.prefix, self.subnet, self.port_base = prefix, subnet, port_base
        self.mgmt_base, self.mac_byte, self.numbered = mgmt_base, mac_byte, numbered

    def name(self, i):
        return "%s%d" % (self.prefix, i) if self.numbered else self.prefix

    def ip(self, i):
        return "10.0.%d.%d" % (self.subnet, i)

    def mgmt(self, i):
        return "10.100.0.%d" % (self.mgmt_base + i)

    def mac(self, i):
        return "02:4e:44:%02x:00:%02x" % (self.mac_byte, i)

    def port(self, i):
        return self.port_base + i


STORAGE = Kind("n", 1, 0, 0, 1)
CLIENT = Kind("c", 2, 100, 100, 2)
CONTROLLER = Kind("ctl", 3, 199, 199, 3, numbered=False)


class BMv2Switch(Switch):
    """simple_switch_grpc in a namespace of its own, one BMv2 port per data
    link; its management interface (port 0) carries P4Runtime and Thrift."""

    def __init__(self, name, sw_path="simple_switch_grpc", json_path=None,
                 grpc_port=9559, thrift_port=9090, device_id=1, log_path=None, **kw):
        kw["inNamespace"] = True
        Switch.__init__(self, name, **kw)
        self.sw_path = sw_path
        self.json_path = json_path
        self.grpc_port = grpc_port
        self.thrift_port = thrift_port
        self.device_id = device_id
        self.log_path = log_path or "/tmp/netdir-testbed/%s.log" % name
        self.sw_pid = None

    def start(self, controllers):
        mgmt = self.intfs[MGMT_PORT].name
        self.cmd("ip link set lo up; ip addr add %s/24 dev %s; ip link set %s up" % (SWITCH_MGMT, mgmt, mgmt))
        args = [self.sw_path, "--device-id", str(self.device_id)]
        for port, intf in sorted(self.intfs.items()):
            if port != MGMT_PORT:
                args += ["-i", "%d@%s" % (port, intf.name)]
        args += ["--thrift-port", str(self.thrift_port)]
        args += [self.json_path] if self.json_path else ["--no-p4"]
        args += ["--", "--grpc-server-addr", "0.0.0.0:%d" % self.grpc_port]
        info("*** %s: %s\n" % (self.name, " ".join(args)))
        self.cmd(" ".join(args) + " > %s 2>&1 &" % self.log_path)
        self.sw_pid = int(self.cmd("echo $!").strip())
        deadline = time.time() + 30
        while time.time() < deadline:
            if "up" in self.cmd("(echo > /dev/tcp/127.0.0.1/%d) 2>/dev/null && echo up" % self.grpc_port):
                return
            time.sleep(0.2)
        raise RuntimeError("%s did not open P4Runtime port %d; see %s"
                           % (self.sw_path, self.grpc_port, self.log_path))

    def stop_process(self):
        """Stops simple_switch_grpc (only the process this switch started,
        by its pid) and waits for it: before Mininet deletes the links, or
        BMv2's port monitor reports each vanished port as `open: No such
        file or directory`."""
        if self.sw_pid:
            self.cmd("kill %d 2>/dev/null; wait %d 2>/dev/null" % (self.sw_pid, self.sw_pid))
            self.sw_pid = None

    def stop(self, deleteIntfs=True):
        self.stop_process()
        Switch.stop(self, deleteIntfs)


class KernelBridge(Switch):
    """The management network: a Linux bridge in the root namespace, with no
    address there."""

    def start(self, controllers):
        self.cmd("ip link del %s 2>/dev/null; ip link add name %s type bridge" % (self.name, self.name))
        for intf in self.intfList():
            if intf.name != "lo":
                self.cmd("ip link set %s master %s up" % (intf.name, self.name))
        self.cmd("ip link set %s up" % self.name)

    def stop(self, deleteIntfs=True):
        self.cmd("ip link del %s 2>/dev/null" % self.name)
        Switch.stop(self, deleteIntfs)


def build(n_storage, n_clients, sw_path, json_path):
    if not (1 <= n_storage <= 99 and 1 <= n_clients <= 98):
        raise SystemExit("topo.py: 1..99 storage hosts and 1..98 clients")
    net = Mininet(controller=None, autoSetMacs=False, autoStaticArp=False, build=False)
    s1 = net.addSwitch("s1", cls=BMv2Switch, sw_path=sw_path, json_path=json_path)
    m0 = net.addSwitch("m0", cls=KernelBridge)
    net.addLink(s1, m0, port1=MGMT_PORT)
    hosts = []
    for kind, count in ((STORAGE, n_storage), (CLIENT, n_clients), (CONTROLLER, 1)):
        for i in range(1, count + 1):
            h = net.addHost(kind.name(i), ip=kind.ip(i) + "/16", mac=kind.mac(i))
            net.addLink(h, s1, port1=0, port2=kind.port(i))
            net.addLink(h, m0, port1=1)
            hosts.append((kind, i, h))
    net.build()
    net.start()
    for kind, i, h in hosts:
        h.cmd("ip addr add %s/24 dev %s-eth1; ip link set %s-eth1 up" % (kind.mgmt(i), h.name, h.name))
        h.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
        # BMv2 re-sends frames as it reads them: checksums left partial by
        # veth offload would reach the receiver wrong.
        h.cmd("ethtool -K %s-eth0 tx off rx off >/dev/null 2>&1" % h.name)
        # Static ARP: the service address is the switch; hosts are themselves.
        h.cmd("ip neigh replace %s lladdr %s dev %s-eth0" % (SERVICE_IP, SWITCH_MAC, h.name))
        for kind2, i2, h2 in hosts:
            if h2 is not h:
                h.cmd("ip neigh replace %s lladdr %s dev %s-eth0" % (kind2.ip(i2), kind2.mac(i2), h.name))
    return net, s1, hosts


def plan(s1, hosts):
    """The addresses and namespaces (by pid) run.sh hands to the netdir
    processes, as JSON."""
    out = {"service": "%s:%d" % (SERVICE_IP, SERVICE_PORT),
           "switch": {"grpc": "%s:%d" % (SWITCH_MGMT, s1.grpc_port), "thrift": "%s:%d" % (SWITCH_MGMT, s1.thrift_port),
                      "device_id": s1.device_id, "mac": SWITCH_MAC, "pid": s1.pid},
           "nodes": [], "clients": []}
    for kind, i, h in hosts:
        row = {"id": i, "host": h.name, "ip": kind.ip(i), "mac": kind.mac(i), "port": kind.port(i),
               "mgmt": kind.mgmt(i), "pid": h.pid}
        if kind is STORAGE:
            out["nodes"].append(row)
        elif kind is CLIENT:
            out["clients"].append(row)
        else:
            out["controller"] = row
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--storage", type=int, default=6, help="storage hosts (n)")
    ap.add_argument("--clients", type=int, default=2, help="client hosts (k)")
    ap.add_argument("--switch", default=shutil.which("simple_switch_grpc") or "simple_switch_grpc")
    ap.add_argument("--json", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "..", "p4", "build", "netdir.json"))
    ap.add_argument("--plan", default="/tmp/netdir-testbed/plan.json", help="where to write the address plan")
    ap.add_argument("--exec", dest="scripts", action="append", default=[],
                    help="shell script run in the root namespace once the network is up, with the plan "
                         "path as $1 (bmv2-testbed/lib.sh has helpers); repeat for more, run in order "
                         "while each succeeds")
    ap.add_argument("--stop", default="", help="shell script run (same argument) before the network stops")
    ap.add_argument("--no-cli", action="store_true", help="do not open the Mininet CLI")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("topo.py: Mininet needs root")
    os.makedirs(os.path.dirname(args.plan), exist_ok=True)
    setLogLevel("info")
    net, s1, hosts = build(args.storage, args.clients, args.switch, os.path.abspath(args.json))
    status = 1
    try:
        with open(args.plan, "w") as f:
            json.dump(plan(s1, hosts), f, indent=2)
        info("*** plan written to %s\n" % args.plan)
        status = 0
        for script in args.scripts:
            status = subprocess.run(["bash", script, args.plan], check=False).returncode
            if status != 0:
                info("*** %s exited %d\n" % (script, status))
                break
        if not args.no_cli:
            CLI(net)
    finally:
        if args.stop:
            subprocess.run(["bash", args.stop, args.plan], check=False)
        s1.stop_process()
        net.stop()
    sys.exit(status)


if __name__ == "__main__":
    main()
