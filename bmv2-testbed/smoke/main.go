//go:build linux

// Command smoke checks the BMv2 testbed end to end: run.sh --smoke runs it on
// the controller host once start.sh has started the nodes, the controller and
// the agent. Clients run in the client hosts' namespaces, so every request
// passes BMv2; the switch's state is read over P4Runtime (tables) and Thrift
// (registers) on the management network, the agent's over its /directory.
// Each step prints what it saw; the first that fails ends the run with
// status 1.
package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"syscall"
	"time"

	p4 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/nicagent"
	"github.com/netdir/netdir/p4/bmv2test"
	"github.com/netdir/netdir/wire"
)

// host is one host of plan.json (topo.py).
type host struct {
	ID   int    `json:"id"`
	Host string `json:"host"`
	IP   string `json:"ip"`
	Mgmt string `json:"mgmt"`
	PID  int    `json:"pid"`
}

type plan struct {
	Service string `json:"service"`
	Switch  struct {
		GRPC     string `json:"grpc"`
		Thrift   string `json:"thrift"`
		DeviceID uint64 `json:"device_id"`
	} `json:"switch"`
	Controller host   `json:"controller"`
	Nodes      []host `json:"nodes"`
	Clients    []host `json:"clients"`
}

const key = "smoke-key"

func main() {
	planPath := flag.String("plan", "/tmp/netdir-testbed/plan.json", "the testbed's address plan")
	p4info := flag.String("p4info", "p4/build/netdir.p4info.txtpb", "the switch's P4Info")
	flag.Parse()
	s, err := newSmoke(*planPath, *p4info)
	if err != nil {
		fail("setup", err)
	}
	s.run()
}

func fail(step string, err error) {
	fmt.Printf("FAIL %s: %v\n", step, err)
	os.Exit(1)
}

// smoke holds the connections the steps share.
type smoke struct {
	plan   plan
	work   string // the plan's directory: logs and pid files
	schema *p4rt.Schema
	rt     p4.P4RuntimeClient // reads only: no arbitration, the controller stays primary
	thrift *bmv2test.Thrift
	ctl    api.ControllerClient
	agent  string // c1's agent, http://ADDR
	c1, c2 *client.Client
	hash   wire.KeyHash
}

func newSmoke(planPath, p4info string) (*smoke, error) {
	s := &smoke{work: filepath.Dir(planPath), hash: wire.HashKey([]byte(key))}
	b, err := os.ReadFile(planPath)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &s.plan); err != nil {
		return nil, fmt.Errorf("%s: %w", planPath, err)
	}
	if len(s.plan.Clients) < 2 {
		return nil, fmt.Errorf("want 2 client hosts, the plan has %d", len(s.plan.Clients))
	}
	if s.schema, err = p4rt.LoadSchema(p4info); err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(s.plan.Switch.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	s.rt = p4.NewP4RuntimeClient(conn)
	tc, err := net.DialTimeout("tcp", s.plan.Switch.Thrift, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("switch thrift: %w", err)
	}
	s.thrift = bmv2test.NewThrift(tc)
	cc, err := grpc.NewClient("127.0.0.1:7400", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	s.ctl = api.NewControllerClient(cc)
	s.agent = "http://" + s.plan.Clients[0].Mgmt + ":9475"
	if s.c1, err = s.clientOn(s.plan.Clients[0]); err != nil {
		return nil, err
	}
	if s.c2, err = s.clientOn(s.plan.Clients[1]); err != nil {
		return nil, err
	}
	return s, nil
}

// clientOn opens a client whose socket lives in h's namespace.
func (s *smoke) clientOn(h host) (*client.Client, error) {
	var c *client.Client
	err := bmv2test.InNetnsPath(fmt.Sprintf("/proc/%d/ns/net", h.PID), func() error {
		var err error
		c, err = client.New(client.Options{Service: s.plan.Service})
		return err
	})
	return c, err
}

func (s *smoke) run() {
	ctx := context.Background()
	step := func(name string, f func() (string, error)) {
		what, err := f()
		if err != nil {
			fail(name, err)
		}
		fmt.Printf("ok   %s: %s\n", name, what)
	}
	var version uint64
	step("put and get through BMv2", func() (string, error) {
		v, err := s.c2.Put(ctx, []byte(key), []byte("v1"))
		if err != nil {
			return "", err
		}
		val, got, err := s.c2.Get(ctx, []byte(key))
		if err != nil || string(val) != "v1" || got != v {
			return "", fmt.Errorf("read back %q version %d (%v), want \"v1\" version %d", val, got, err, v)
		}
		version = v
		return fmt.Sprintf("%s = v1 at version %d from c2", key, v), nil
	})
	epochsBefore, err := s.coarseEpochs()
	if err != nil {
		fail("controller log", err)
	}
	var e *api.DirectoryEntry
	step("hot key promoted with extras", func() (string, error) {
		reads := 0
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			if _, err := s.reads(ctx, s.c1, 200); err != nil {
				return "", err
			}
			reads += 200
			if e, err = s.entry(ctx); err != nil {
				return "", err
			}
			if e != nil && len(e.GetLocations()) > int(e.GetChainLength()) {
				return fmt.Sprintf("after %d reads from c1 (through its agent and the switch): %s", reads, describe(e)), nil
			}
		}
		return "", fmt.Errorf("not promoted with extra copies after %d reads (directory entry: %s)", reads, describe(e))
	})
	// From here on c1 keeps the key hot (about 200 reads a second), as a
	// real hot key stays: cold rounds would evict it.
	hot, stopHot := context.WithCancel(ctx)
	defer stopHot()
	go func() {
		for hot.Err() == nil {
			s.c1.GetResult(hot, []byte(key))
			time.Sleep(5 * time.Millisecond)
		}
	}()
	locs := e.GetLocations()
	step("reads spread over the chain and the extras", func() (string, error) {
		served, err := s.reads(ctx, s.c2, 600)
		if err != nil {
			return "", err
		}
		for n := range served {
			if !slices.Contains(locs, uint32(n)) {
				return "", fmt.Errorf("node %d, not one of the key's locations %v, served reads: %v", n, locs, served)
			}
		}
		if len(served) != len(locs) {
			return "", fmt.Errorf("600 reads from c2 reached %v, not every location of %v", served, locs)
		}
		return fmt.Sprintf("600 reads from c2 served by node: %v", served), nil
	})
	all := uint32(1)<<len(locs) - 1
	step("switch and agent agree, every copy fresh", func() (string, error) {
		sw, ag, err := s.settle(func(sw, ag state) bool { return sw.Fresh == all && sw == ag })
		if err != nil {
			return "", fmt.Errorf("%w: switch %v, agent %v, want fresh %b", err, sw, ag, all)
		}
		return fmt.Sprintf("switch %v = agent %v", sw, ag), nil
	})
	step("write clears an extra's fresh bit, its VSB brings it back", func() (string, error) {
		extra := int(e.GetChainLength()) // the first extra's index in the LocationList
		pid, err := s.nodePID(locs[extra])
		if err != nil {
			return "", err
		}
		// Paused, the extra takes the head's copy of the write only when it
		// resumes, so the switch shows its bit cleared until then.
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return "", err
		}
		v, err := s.c2.Put(ctx, []byte(key), []byte("v2"))
		if err != nil {
			syscall.Kill(pid, syscall.SIGCONT)
			return "", err
		}
		cleared := all &^ (1 << extra)
		sw1, ag1, err := s.settle(func(sw, ag state) bool { return sw.VerDone == v && sw.Fresh == cleared && sw == ag })
		syscall.Kill(pid, syscall.SIGCONT)
		if err != nil {
			return "", fmt.Errorf("%w after the write of version %d with node %d paused: switch %v, agent %v, want fresh %b",
				err, v, locs[extra], sw1, ag1, cleared)
		}
		sw2, ag2, err := s.settle(func(sw, ag state) bool { return sw.VerDone == v && sw.Fresh == all && sw == ag })
		if err != nil {
			return "", fmt.Errorf("%w after node %d resumed: switch %v, agent %v, want fresh %b", err, locs[extra], sw2, ag2, all)
		}
		val, got, err := s.c1.Get(ctx, []byte(key))
		if err != nil || string(val) != "v2" || got != v {
			return "", fmt.Errorf("c1 read %q version %d (%v), want \"v2\" version %d", val, got, err, v)
		}
		version = v
		return fmt.Sprintf("version %d with node %d paused: switch %v = agent %v; resumed: switch %v = agent %v (the agent learns through the switch's VSB group)",
			v, locs[extra], sw1, ag1, sw2, ag2), nil
	})
	step("coarse weights installed", func() (string, error) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			n, err := s.coarseEpochs()
			if err != nil {
				return "", err
			}
			if n > epochsBefore {
				break
			}
			if time.Now().After(deadline) {
				return "", fmt.Errorf("no coarse epoch with the key in the directory in 30 s (%s/controller.log)", s.work)
			}
			time.Sleep(500 * time.Millisecond)
		}
		// An epoch may install new weights while they are read: compare
		// until the three agree, for up to 5 s.
		var diff error
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if what, err := s.weightsAgree(ctx); err != nil {
				diff = err
			} else {
				return what, nil
			}
		}
		return "", diff
	})
	fmt.Printf("smoke: every step passed (%s at version %d)\n", key, version)
}

// weightsAgree compares the key's and its partition's split weights at the
// controller, in the switch's tables and (the key's) in the agent's maps.
func (s *smoke) weightsAgree(ctx context.Context) (string, error) {
	e, err := s.entry(ctx)
	if err != nil || e == nil {
		return "", fmt.Errorf("the key left the directory (%v)", err)
	}
	ctlSlot := weights(e.GetBuckets(), len(e.GetLocations()))
	swSlot, err := s.switchSlotWeights(ctx, len(e.GetLocations()))
	if err != nil {
		return "", err
	}
	ag, err := s.agentSlot()
	if err != nil {
		return "", err
	}
	agSlot := weights(toU32(ag.Buckets), len(e.GetLocations()))
	if !slices.Equal(ctlSlot, swSlot) || !slices.Equal(ctlSlot, agSlot) {
		return "", fmt.Errorf("the key's weights over %v: controller %v, switch %v, agent %v", e.GetLocations(), ctlSlot, swSlot, agSlot)
	}
	part := s.hash.Partition(10)
	ctlPart, chain, err := s.partitionWeights(ctx, part)
	if err != nil {
		return "", err
	}
	swPart, err := s.switchPartitionWeights(ctx, part, len(chain))
	if err != nil {
		return "", err
	}
	if !slices.Equal(ctlPart, swPart) {
		return "", fmt.Errorf("partition %d's weights over %v: controller %v, switch %v", part, chain, ctlPart, swPart)
	}
	return fmt.Sprintf("the key's weights over %v: %v (controller = switch = agent); its partition %d's over %v: %v (controller = switch)",
		e.GetLocations(), ctlSlot, part, chain, ctlPart), nil
}

// reads reads the key n times and counts the nodes that served them.
func (s *smoke) reads(ctx context.Context, c *client.Client, n int) (map[wire.NodeID]int, error) {
	served := map[wire.NodeID]int{}
	for range n {
		r, err := c.GetResult(ctx, []byte(key))
		if err != nil {
			return served, err
		}
		served[r.Node]++
	}
	return served, nil
}

// entry is the key's directory entry at the controller, or nil.
func (s *smoke) entry(ctx context.Context) (*api.DirectoryEntry, error) {
	r, err := s.ctl.ListDirectory(ctx, &api.ListDirectoryRequest{})
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	for _, e := range r.GetEntries() {
		if bytes.Equal(e.GetKeyHash(), s.hash[:]) {
			return e, nil
		}
	}
	return nil, nil
}

func describe(e *api.DirectoryEntry) string {
	if e == nil {
		return "none"
	}
	r := int(e.GetChainLength())
	return fmt.Sprintf("chain %v, extras %v", e.GetLocations()[:r], e.GetLocations()[r:])
}

// state is a slot's coherence state in one plane.
type state struct {
	Fresh            uint32
	VerNext, VerDone uint64
}

func (st state) String() string {
	return fmt.Sprintf("{fresh %b, ver_next %d, ver_done %d}", st.Fresh, st.VerNext, st.VerDone)
}

// settle polls both planes' state of the key until ok holds, for up to 5 s.
func (s *smoke) settle(ok func(sw, ag state) bool) (sw, ag state, err error) {
	for deadline := time.Now().Add(5 * time.Second); ; {
		if sw, err = s.switchState(); err != nil {
			return
		}
		a, err := s.agentSlot()
		if err != nil {
			return sw, ag, err
		}
		ag = state{a.Fresh, a.VerNext, a.VerDone}
		if ok(sw, ag) {
			return sw, ag, nil
		}
		if time.Now().After(deadline) {
			return sw, ag, fmt.Errorf("not settled in 5 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// switchSlot reads the key's slots entry over P4Runtime: its action's
// slot parameter.
func (s *smoke) switchSlot() (uint64, error) {
	te, err := s.schema.Entry("slots", []p4rt.Match{{Field: "keyhash", Value: s.hash[:]}}, "hit")
	if err != nil {
		return 0, err
	}
	te.Action = nil
	es, err := s.read(context.Background(), te)
	if err != nil {
		return 0, err
	}
	if len(es) != 1 {
		return 0, fmt.Errorf("switch: %d slots entries for the key, want 1", len(es))
	}
	return s.param(es[0], "hit", "slot")
}

// switchState reads the key's coherence registers over Thrift.
func (s *smoke) switchState() (state, error) {
	slot, err := s.switchSlot()
	if err != nil {
		return state{}, err
	}
	var v [3]uint64
	for i, r := range []string{"fresh", "ver_next", "ver_done"} {
		if v[i], err = s.thrift.RegisterRead("NetdirIngress.netdir.coherence."+r, int(slot)); err != nil {
			return state{}, fmt.Errorf("switch thrift: %s: %w", r, err)
		}
	}
	return state{uint32(v[0]), v[1], v[2]}, nil
}

// switchSlotWeights counts the key's slot_buckets_a entries per location.
func (s *smoke) switchSlotWeights(ctx context.Context, n int) ([]uint32, error) {
	slot, err := s.switchSlot()
	if err != nil {
		return nil, err
	}
	return s.bucketWeights(ctx, "slot_buckets_a", "set_loc_a", "slot", slot, n)
}

// switchPartitionWeights counts a partition's buckets_a entries per chain
// member.
func (s *smoke) switchPartitionWeights(ctx context.Context, part uint32, n int) ([]uint32, error) {
	return s.bucketWeights(ctx, "buckets_a", "set_chain_a", "partition", uint64(part), n)
}

// bucketWeights reads a bucket table whole (PI reads a table whole or one
// entry by its exact key, and the bucket is range-matched: one entry per
// run of equal buckets) and counts, over the entries whose field is v, the
// buckets each index parameter covers. Every one of the 32 buckets must be
// covered once.
func (s *smoke) bucketWeights(ctx context.Context, table, action, field string, v uint64, n int) ([]uint32, error) {
	t, err := s.schema.Table(table)
	if err != nil {
		return nil, err
	}
	var owner, bucket uint32
	for _, f := range t.GetMatchFields() {
		switch f.GetName() {
		case field:
			owner = f.GetId()
		case "bucket":
			bucket = f.GetId()
		}
	}
	es, err := s.read(ctx, &p4.TableEntry{TableId: t.GetPreamble().GetId()})
	if err != nil {
		return nil, err
	}
	w := make([]uint32, n)
	covered := 0
	for _, e := range es {
		var mine bool
		var lo, hi uint64
		for _, m := range e.GetMatch() {
			switch m.GetFieldId() {
			case owner:
				mine = uintOf(m.GetExact().GetValue()) == v
			case bucket:
				lo, hi = uintOf(m.GetRange().GetLow()), uintOf(m.GetRange().GetHigh())
			}
		}
		if !mine {
			continue
		}
		idx, err := s.param(e, action, "index")
		if err != nil {
			return nil, err
		}
		if int(idx) >= n || hi < lo || hi > 31 {
			return nil, fmt.Errorf("switch: %s[%d, %d..%d] points at index %d of %d", table, v, lo, hi, idx, n)
		}
		w[idx] += uint32(hi - lo + 1)
		covered += int(hi - lo + 1)
	}
	if covered != 32 {
		return nil, fmt.Errorf("switch: %s[%d]: %d of 32 buckets covered", table, v, covered)
	}
	return w, nil
}

func uintOf(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

func (s *smoke) read(ctx context.Context, te *p4.TableEntry) ([]*p4.TableEntry, error) {
	rc, err := s.rt.Read(ctx, &p4.ReadRequest{DeviceId: s.plan.Switch.DeviceID,
		Entities: []*p4.Entity{{Entity: &p4.Entity_TableEntry{TableEntry: te}}}})
	if err != nil {
		return nil, fmt.Errorf("switch p4runtime: %w", err)
	}
	var out []*p4.TableEntry
	for {
		r, err := rc.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("switch p4runtime: %w", err)
		}
		for _, e := range r.GetEntities() {
			out = append(out, e.GetTableEntry())
		}
	}
}

// param is a parameter of a read entry's action, by name.
func (s *smoke) param(te *p4.TableEntry, action, name string) (uint64, error) {
	a, err := s.schema.Action(action)
	if err != nil {
		return 0, err
	}
	for _, p := range a.GetParams() {
		if p.GetName() != name {
			continue
		}
		for _, ap := range te.GetAction().GetAction().GetParams() {
			if ap.GetParamId() == p.GetId() {
				return uintOf(ap.GetValue()), nil
			}
		}
	}
	return 0, fmt.Errorf("switch: entry of table %d has no %s parameter %q", te.GetTableId(), action, name)
}

// agentSlot is the key's slot in c1's agent's maps (its /directory).
func (s *smoke) agentSlot() (nicagent.SlotJSON, error) {
	r, err := http.Get(s.agent + "/directory")
	if err != nil {
		return nicagent.SlotJSON{}, fmt.Errorf("agent: %w", err)
	}
	defer r.Body.Close()
	var slots []nicagent.SlotJSON
	if err := json.NewDecoder(r.Body).Decode(&slots); err != nil {
		return nicagent.SlotJSON{}, fmt.Errorf("agent: /directory: %w", err)
	}
	for _, sl := range slots {
		if sl.KeyHash == hex.EncodeToString(s.hash[:]) {
			return sl, nil
		}
	}
	return nicagent.SlotJSON{}, fmt.Errorf("agent: the key is not in its maps (%d slots)", len(slots))
}

// partitionWeights is a partition's chain and weights at the controller.
func (s *smoke) partitionWeights(ctx context.Context, part uint32) ([]uint32, []uint32, error) {
	r, err := s.ctl.ListPartitions(ctx, &api.ListPartitionsRequest{})
	if err != nil {
		return nil, nil, fmt.Errorf("controller: %w", err)
	}
	for _, p := range r.GetPartitions() {
		if p.GetIndex() == part {
			return weights(p.GetBuckets(), len(p.GetChain())), p.GetChain(), nil
		}
	}
	return nil, nil, fmt.Errorf("controller: no partition %d", part)
}

// weights counts the buckets per location.
func weights(buckets []uint32, n int) []uint32 {
	w := make([]uint32, n)
	for _, b := range buckets {
		if int(b) < n {
			w[b]++
		}
	}
	return w
}

func toU32(xs []int) []uint32 {
	out := make([]uint32, len(xs))
	for i, x := range xs {
		out[i] = uint32(x)
	}
	return out
}

// coarseEpochs counts the controller's coarse epochs that had a directory
// key, from its log.
func (s *smoke) coarseEpochs() (int, error) {
	b, err := os.ReadFile(s.work + "/controller.log")
	if err != nil {
		return 0, err
	}
	return len(epochWithKeys.FindAll(b, -1)), nil
}

var epochWithKeys = regexp.MustCompile(`msg="coarse epoch".* keys=[1-9]`)

// nodePID is the pid of node id's process (start.sh's node<id>.pid).
func (s *smoke) nodePID(id uint32) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("%s/node%d.pid", s.work, id))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(bytes.TrimSpace(b)))
}
