#!/usr/bin/python3
"""netdir BMv2 testbed: a Mininet topology around one simple_switch_grpc.

    data network 10.0.0.0/16 (through the P4 switch s1)
      storage hosts  n1..nN  10.0.1.i   switch ports 1..N
      client hosts   c1..cK  10.0.2.j   switch ports 101..100+K
      service address        10.0.0.254:7420 (the directory; no host owns it)
    management network 10.100.0.0/24 (a kernel bridge, not through s1)
      controller  10.100.0.254  (the root namespace: it also reaches the
                                 switch's P4Runtime at 127.0.0.1:9559)
      every host  10.100.0.x on its eth1

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
import socket
import subprocess
import sys
import time

from mininet.cli import CLI
from mininet.log import info, setLogLevel
from mininet.net import Mininet
from mininet.node import Host, Switch

SERVICE_IP = "10.0.0.254"
SERVICE_PORT = 7420
SWITCH_MAC = "02:4e:44:ff:ff:fe"
MGMT_IP = "10.100.0.254"
STORAGE_PORT_BASE = 0  # storage host i on switch port i (1..N)
CLIENT_PORT_BASE = 100  # client j on switch port 100+j


def storage_ip(i):
    return "10.0.1.%d" % i


def client_ip(j):
    return "10.0.2.%d" % j


def host_mac(kind, i):
    return "02:4e:44:%02x:00:%02x" % (1 if kind == "s" else 2, i)


class BMv2Switch(Switch):
    """simple_switch_grpc in the root namespace, one BMv2 port per link."""

    def __init__(self, name, sw_path="simple_switch_grpc", json_path=None,
                 grpc_port=9559, thrift_port=9090, device_id=1, log_path=None, **kw):
        Switch.__init__(self, name, **kw)
        self.sw_path = sw_path
        self.json_path = json_path
        self.grpc_port = grpc_port
        self.thrift_port = thrift_port
        self.device_id = device_id
        self.log_path = log_path or "/tmp/netdir-testbed/%s.log" % name

    def start(self, controllers):
        args = [self.sw_path, "--device-id", str(self.device_id)]
        for port, intf in sorted(self.intfs.items()):
            if intf.name != "lo":
                args += ["-i", "%d@%s" % (port, intf.name)]
        args += ["--thrift-port", str(self.thrift_port)]
        args += [self.json_path] if self.json_path else ["--no-p4"]
        args += ["--", "--grpc-server-addr", "0.0.0.0:%d" % self.grpc_port]
        info("*** %s: %s\n" % (self.name, " ".join(args)))
        self.cmd(" ".join(args) + " > %s 2>&1 &" % self.log_path)
        self.sw_pid = int(self.cmd("echo $!").strip())
        deadline = time.time() + 30
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.grpc_port)) == 0:
                    return
            time.sleep(0.2)
        raise RuntimeError("%s did not open P4Runtime port %d; see %s"
                           % (self.sw_path, self.grpc_port, self.log_path))

    def stop(self, deleteIntfs=True):
        # Only the process this switch started, by its pid.
        self.cmd("kill %d 2>/dev/null; wait %d 2>/dev/null" % (self.sw_pid, self.sw_pid))
        Switch.stop(self, deleteIntfs)


class KernelBridge(Switch):
    """The management network: a Linux bridge in the root namespace that
    also carries the controller's address."""

    def __init__(self, name, ip=MGMT_IP, **kw):
        Switch.__init__(self, name, **kw)
        self.mgmt_ip = ip

    def start(self, controllers):
        self.cmd("ip link del %s 2>/dev/null; ip link add name %s type bridge" % (self.name, self.name))
        for intf in self.intfList():
            if intf.name != "lo":
                self.cmd("ip link set %s master %s up" % (intf.name, self.name))
        self.cmd("ip addr add %s/24 dev %s; ip link set %s up" % (self.mgmt_ip, self.name, self.name))

    def stop(self, deleteIntfs=True):
        self.cmd("ip link del %s 2>/dev/null" % self.name)
        Switch.stop(self, deleteIntfs)


def build(n_storage, n_clients, sw_path, json_path):
    net = Mininet(controller=None, autoSetMacs=False, autoStaticArp=False, build=False)
    s1 = net.addSwitch("s1", cls=BMv2Switch, sw_path=sw_path, json_path=json_path)
    m0 = net.addSwitch("m0", cls=KernelBridge)
    hosts = []
    for i in range(1, n_storage + 1):
        h = net.addHost("n%d" % i, ip=storage_ip(i) + "/16", mac=host_mac("s", i))
        net.addLink(h, s1, port1=0, port2=STORAGE_PORT_BASE + i)
        net.addLink(h, m0, port1=1)
        hosts.append(("s", i, h))
    for j in range(1, n_clients + 1):
        h = net.addHost("c%d" % j, ip=client_ip(j) + "/16", mac=host_mac("c", j))
        net.addLink(h, s1, port1=0, port2=CLIENT_PORT_BASE + j)
        net.addLink(h, m0, port1=1)
        hosts.append(("c", j, h))
    net.build()
    net.start()
    mgmt = 1
    for kind, i, h in hosts:
        h.cmd("ip addr add 10.100.0.%d/24 dev %s-eth1; ip link set %s-eth1 up" % (mgmt, h.name, h.name))
        mgmt += 1
        h.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
        # BMv2 re-sends frames as read; offloaded (partial) checksums would stay wrong.
        # BMv2 re-sends frames as it reads them: checksums left partial by
        # veth offload would reach the receiver wrong.
        h.cmd("ethtool -K %s-eth0 tx off rx off >/dev/null 2>&1" % h.name)
        # Static ARP: the service address is the switch; hosts are themselves.
        h.cmd("ip neigh replace %s lladdr %s dev %s-eth0" % (SERVICE_IP, SWITCH_MAC, h.name))
        for kind2, i2, h2 in hosts:
            if h2 is not h:
                ip = storage_ip(i2) if kind2 == "s" else client_ip(i2)
                h.cmd("ip neigh replace %s lladdr %s dev %s-eth0" % (ip, host_mac(kind2, i2), h.name))
    return net, hosts


def plan(hosts):
    """The addresses run.sh hands to the netdir processes, as JSON."""
    out = {"service": "%s:%d" % (SERVICE_IP, SERVICE_PORT), "controller": MGMT_IP,
           "switch": {"grpc": "127.0.0.1:9559", "thrift": 9090, "device_id": 1, "mac": SWITCH_MAC},
           "nodes": [], "clients": []}
    for kind, i, h in hosts:
        if kind == "s":
            out["nodes"].append({"id": i, "host": h.name, "ip": storage_ip(i), "mac": host_mac("s", i),
                                 "port": STORAGE_PORT_BASE + i, "mgmt": h.IP(intf="%s-eth1" % h.name)})
        else:
            out["clients"].append({"id": i, "host": h.name, "ip": client_ip(i), "mac": host_mac("c", i),
                                   "port": CLIENT_PORT_BASE + i})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--storage", type=int, default=3, help="storage hosts (n)")
    ap.add_argument("--clients", type=int, default=2, help="client hosts (k)")
    ap.add_argument("--switch", default=shutil.which("simple_switch_grpc") or "simple_switch_grpc")
    ap.add_argument("--json", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "..", "p4", "build", "netdir.json"))
    ap.add_argument("--plan", default="/tmp/netdir-testbed/plan.json", help="where to write the address plan")
    ap.add_argument("--exec", dest="script", default="",
                    help="shell script run in the root namespace once the network is up; "
                         "it gets the plan path as $1 and can use mx HOST CMD (see run.sh)")
    ap.add_argument("--then", dest="then", default="",
                    help="shell script run after --exec's (same arguments)")
    ap.add_argument("--no-cli", action="store_true", help="do not open the Mininet CLI")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("topo.py: Mininet needs root")
    os.makedirs(os.path.dirname(args.plan), exist_ok=True)
    setLogLevel("info")
    net, hosts = build(args.storage, args.clients, args.switch, os.path.abspath(args.json))
    try:
        p = plan(hosts)
        with open(args.plan, "w") as f:
            json.dump(p, f, indent=2)
        info("*** plan written to %s\n" % args.plan)
        # Scripts reach Mininet hosts by name through their pids (nsenter).
        env = dict(os.environ)
        env["NETDIR_HOST_PIDS"] = " ".join("%s=%d" % (h.name, h.pid) for _, _, h in hosts)
        status = 0
        if args.script:
            status = subprocess.run(["bash", args.script, args.plan], env=env, check=False).returncode
        if args.then and status == 0:
            status = subprocess.run(["bash", args.then, args.plan], env=env, check=False).returncode
        if not args.no_cli:
            CLI(net)
    finally:
        net.stop()
    sys.exit(status)


if __name__ == "__main__":
    main()
